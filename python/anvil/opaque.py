"""What crosses between the judge and the candidate's process as neither a plain tensor nor a plain
value: named by its type, equal to nothing (anvil.channel decodes it; anvil.batch's remote
outputs too)."""


class Opaque:
    """Something the candidate returned that is neither a plain tensor nor a plain value."""

    def __init__(self, type_name):
        self.type_name = type_name

    def __repr__(self):
        return "<%s>" % self.type_name

    def __eq__(self, other):
        return False

    __hash__ = None
