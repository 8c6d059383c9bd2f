# ATTACK ON PURPOSE (red team, class "shadow module"): a package named like anvil's.
