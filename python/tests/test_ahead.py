"""anvil.ahead reads a single file's load_inline calls without running it (issue 56): what it reads
must be exactly what the file's own load_inline asks the judge to build (the same texts and flags:
the same cache key), and a call it cannot read is skipped with its reason, never guessed."""
import glob
import os
import textwrap

import pytest

from anvil import ahead
from anvil import load_inline as li

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = sorted(glob.glob(os.path.join(ROOT, "examples", "kernelbench", "cpu", "*_model_new.py")) +
               glob.glob(os.path.join(ROOT, "examples", "redteam", "*", "model_new.py")))


def asked(path):
    """What the file's own load_inline calls ask the judge to build, running it (the evaluation's
    view): every spec its module-level code reaches."""
    specs = []

    def refuse(spec):
        specs.append(spec)
        return {"ok": False, "error": "Error building extension '%s': recorded" % spec["name"]}

    import torch.utils.cpp_extension as ce

    saved = ce.load_inline
    li.set_builder(refuse)
    ce.load_inline = li.load_inline
    try:
        exec(compile(open(path).read(), path, "exec"), {"__name__": "candidate", "__file__": path})
    except Exception:  # noqa: BLE001 - the first refused build ends the import
        pass
    finally:
        ce.load_inline = saved
        li.set_builder(None)
    return specs


def read_back(build):
    texts = [open(p).read() for p in build["sources"]]
    return texts[0], (texts[1] if len(texts) > 1 else None)


@pytest.mark.parametrize("path", [p for p in FILES if "load_inline" in open(p).read()],
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_what_is_read_is_what_the_file_asks(path, tmp_path):
    builds, skipped = ahead.harvest(open(path).read(), str(tmp_path))
    specs = asked(path)
    if not specs:  # its load_inline refused the call before any build (a name that is no module's)
        assert not builds and skipped, (path, builds)
        return
    first = specs[0]
    if not builds:  # a file whose first call is computed must say why it was not read
        assert skipped, path
        return
    b = builds[0]
    assert b["name"] == first["name"]
    assert read_back(b) == (first["cpp_text"], first["cuda_text"])
    for key, arg in (("cflags", "extra_cflags"), ("cuda_cflags", "extra_cuda_cflags"), ("ldflags", "extra_ldflags"),
                     ("include_dirs", "extra_include_paths")):
        assert b[key] == [v for v in first[arg] if str(v).strip()], key


def test_the_kernelbench_renditions_are_all_read(tmp_path):
    for path in glob.glob(os.path.join(ROOT, "examples", "kernelbench", "cpu", "*_model_new.py")):
        builds, skipped = ahead.harvest(open(path).read(), str(tmp_path / os.path.basename(path)))
        assert len(builds) == 1 and not skipped, (path, skipped)


def harvest(text, tmp_path):
    return ahead.harvest(textwrap.dedent(text), str(tmp_path))


def test_literals_concatenations_and_fstrings_are_read(tmp_path):
    builds, skipped = harvest('''
        from torch.utils.cpp_extension import load_inline
        HEAD = "#include <torch/extension.h>\\n"
        N = 4
        body = HEAD + f"int n() {{ return {N}; }}\\n"
        decl = ["int n();"]
        mod = load_inline("m1", decl, cuda_sources=body, functions={"n": "doc"}, extra_cuda_cflags=["-O3", ""],
                          verbose=True, build_directory=somewhere())
        ''', tmp_path)
    assert not skipped
    (b,) = builds
    assert b["name"] == "m1" and b["cuda_cflags"] == ["-O3"]
    cpp, cuda = read_back(b)
    assert cpp == li.source_texts(["int n();"], None, {"n": "doc"})[0]
    assert cuda.endswith("int n() { return 4; }\n\n") and cuda.startswith(li.CUDA_PRELUDE[0])


@pytest.mark.parametrize("text,why", [
    ('src = make()\nm = load_inline("m", src)\n', "Call"),
    ('src = "a"\nsrc = "b"\nm = load_inline("m", src)\n', "bound once"),
    ('for src in ["a"]:\n    pass\nm = load_inline("m", src)\n', "bound once"),
    ('kw = {}\nm = load_inline("m", "a", **kw)\n', "kwargs"),
    ('m = load_inline(name="m")\n', "no name or cpp_sources"),
    ('m = load_inline("a/b", "x")\n', "not a valid module name"),
    ('m = load_inline("m", "x" + 1)\n', "a + of str and int"),
    ('m = load_inline("m", "x", is_standalone=True)\n', "is_standalone"),
    ('a = b\nb = a\nm = load_inline("m", a)\n', "bound once"),
])
def test_what_cannot_be_read_is_skipped_with_its_reason(text, why, tmp_path):
    builds, skipped = harvest(text, tmp_path)
    assert builds == [] and len(skipped) == 1 and why in skipped[0]["why"], skipped
    assert os.listdir(str(tmp_path)) == []


def test_a_file_that_does_not_parse_or_is_too_large(tmp_path):
    assert harvest("def (:\n", tmp_path)[1][0]["why"].startswith("the file does not parse")
    assert "larger" in ahead.harvest("#" * (ahead.MAX_SOURCE + 1), str(tmp_path))[1][0]["why"]
    # 1 MiB doubled five times is 32 MiB: past MAX_TEXT, so not built, whatever the file spells
    doubling = 'a0 = "%s"\n' % ("a" * (1 << 20)) + "".join("a%d = a%d + a%d\n" % (i + 1, i, i) for i in range(5))
    builds, skipped = ahead.harvest(doubling + 'm = load_inline("m", a5)\n', str(tmp_path))
    assert builds == [] and "larger than" in skipped[0]["why"]
    # a list of one long string, doubled: few elements each time, too long once joined
    lists = 'l0 = ["%s"]\n' % ("a" * (1 << 20)) + "".join("l%d = l%d + l%d\n" % (i + 1, i, i) for i in range(5))
    builds, skipped = ahead.harvest(lists + 'm = load_inline("m", l5)\n', str(tmp_path))
    assert builds == [] and "cpp_sources larger than" in skipped[0]["why"]


def test_cli_prints_one_json_object(tmp_path, capsys):
    path = tmp_path / "model_new.py"
    path.write_text('import torch.utils.cpp_extension as c\nm = c.load_inline("m", "int f();", functions="f")\n'
                    'n = c.load_inline("n", compute())\n')
    assert ahead.main(["--out", str(tmp_path / "out"), str(path)]) == 0
    import json

    reply = json.loads(capsys.readouterr().out)
    assert [b["name"] for b in reply["builds"]] == ["m"]
    assert reply["skipped"] == [{"line": 3, "why": "a Call"}]
    assert os.path.isfile(reply["builds"][0]["sources"][0])


def test_one_file_builds_at_most_so_much_ahead(tmp_path):
    """Dead load_inline calls (a function never called) cost the bench builds the evaluation never
    asks for: at most MAX_BUILDS modules and MAX_WRITTEN bytes of sources a file; the rest is left to
    its evaluation (outside red team, 2026-12-07: 64 calls of one 15 MiB source wrote 961 MB)."""
    calls = "".join('    load_inline("m%d", "int f%d();")\n' % (i, i) for i in range(20))
    builds, skipped = harvest("def never():\n" + calls, tmp_path / "many")
    assert len(builds) == ahead.MAX_BUILDS and len(skipped) == 20 - ahead.MAX_BUILDS
    assert "past what one file may have built ahead" in skipped[0]["why"]
    big = 'A = "%s"\nB = A + A + A + A + A + A + A + A + A + A + A + A + A + A + A\n' % ("a" * (1 << 20))
    builds, skipped = ahead.harvest(big + "".join('m%d = load_inline("m%d", B)\n' % (i, i) for i in range(64)),
                                    str(tmp_path / "big"))
    written = sum(os.path.getsize(p) for b in builds for p in b["sources"])
    assert written <= ahead.MAX_WRITTEN and len(builds) == 4 and len(skipped) == 60, (written, len(builds))
