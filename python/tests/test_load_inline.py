import os
import stat
import subprocess
import sys

import pytest

from anvil import load_inline as li

ADD_CPP = """torch::Tensor add(torch::Tensor a, torch::Tensor b) {
  return a + b;
}"""


def test_main_cpp_with_function_list():
    cpp, cuda = li.source_texts(ADD_CPP, functions=["add"])
    assert cpp == ("#include <torch/extension.h>\n" + ADD_CPP + "\n"
                   "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                   'm.def("add", torch::wrap_pybind_function(add), "add");\n'
                   "}\n")
    assert cuda is None


def test_main_cpp_with_docstrings_and_plain_binding():
    cpp, _ = li.source_texts(["int f();", "int g();"], functions={"f": 'Say "hi"', "g": "G"},
                             with_pytorch_error_handling=False)
    assert cpp == ("#include <torch/extension.h>\nint f();\nint g();\n"
                   "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                   'm.def("f", f, "Say \\"hi\\"");\n'
                   'm.def("g", g, "G");\n'
                   "}\n")


def test_no_functions_means_no_module_block():
    cpp, _ = li.source_texts("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}")
    assert cpp == "#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n"
    with pytest.raises(ValueError, match="Expected 'functions' to be a list or dict"):
        li.source_texts("", functions=3)


def test_cuda_source():
    _, cuda = li.source_texts("", cuda_sources="__global__ void k() {}", functions="k")
    assert cuda == ("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
                    "__global__ void k() {}\n")
    cpp, cuda = li.source_texts("int x;", cuda_sources=["int y;"], no_implicit_headers=True)
    assert (cpp, cuda) == ("int x;\n", "int y;\n")


def test_write_sources(tmp_path):
    paths = li.write_sources(str(tmp_path), "cpp text\n", "cu text\n")
    assert paths == [str(tmp_path / "main.cpp"), str(tmp_path / "cuda.cu")]
    assert (tmp_path / "main.cpp").read_text() == "cpp text\n"
    assert (tmp_path / "cuda.cu").read_text() == "cu text\n"
    assert li.write_sources(str(tmp_path), "x") == [str(tmp_path / "main.cpp")]


def test_build_command():
    argv = li.build_command("/bin/anvil", "ext", "/out", ["/s/main.cpp", "/s/cuda.cu"],
                            extra_cflags=["-O3", "-DX=1"], extra_cuda_cflags=["--use_fast_math"],
                            extra_ldflags=["-lcublas"], extra_include_paths=["/inc"])
    assert argv == ["/bin/anvil", "build-sources", "--name", "ext", "--out", "/out",
                    "--cflag", "-O3", "--cflag", "-DX=1", "--cuda-cflag", "--use_fast_math",
                    "--ldflag", "-lcublas", "--include", "/inc", "/s/main.cpp", "/s/cuda.cu"]
    assert li.build_command("a", "n", "o", ["m.cpp"]) == ["a", "build-sources", "--name", "n", "--out", "o", "m.cpp"]


# A fake `anvil`: records its argv and ANVIL_PYTHON, then answers as $FAKE_MODE says.
FAKE_ANVIL = r"""#!/bin/sh
printf '%s\n' "$@" > "$FAKE_RECORD"
echo "$ANVIL_PYTHON" >> "$FAKE_RECORD.env"
case "$FAKE_MODE" in
  ok)
    # a Python stand-in for the extension: importlib loads it from the path anvil names
    out="$5"
    printf 'def add(a, b):\n    return a + b\n' > "$out/$3.py"
    echo "{\"ok\": true, \"module\": \"$out/$3.py\", \"cached\": false}"
    exit 0 ;;
  fail)
    echo "compiling main.cpp" >&2
    echo '{"ok": false, "diagnostics": "main.cpp:2:3: error: expected ; before }", "log": "/tmp/fake/build.log"}'
    exit 1 ;;
  *)
    echo "anvil: internal trouble" >&2
    exit 2 ;;
esac
"""


@pytest.fixture
def fake_anvil(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "anvil"
    path.parent.mkdir()
    path.write_text(FAKE_ANVIL)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "argv.txt"
    monkeypatch.setenv("ANVIL_BIN", str(path))
    monkeypatch.setenv("FAKE_RECORD", str(record))
    return path, record


def test_success_imports_the_named_module(fake_anvil, tmp_path, monkeypatch):
    path, record = fake_anvil
    monkeypatch.setenv("FAKE_MODE", "ok")
    out = tmp_path / "out"
    module = li.load_inline("fake_ext", ADD_CPP, functions=["add"], extra_cflags=["-O2"],
                            build_directory=str(out))
    assert module.__name__ == "fake_ext"
    assert module.add(2, 3) == 5
    argv = record.read_text().splitlines()
    assert argv[:7] == ["build-sources", "--name", "fake_ext", "--out", str(out), "--cflag", "-O2"]
    assert len(argv) == 8 and argv[7].endswith(os.sep + "main.cpp")
    assert open(argv[7]).read().startswith("#include <torch/extension.h>\n" + ADD_CPP)
    assert (tmp_path / "argv.txt.env").read_text().strip() == sys.executable


def test_cuda_sources_are_passed_and_intermediates_removed(fake_anvil, monkeypatch):
    path, record = fake_anvil
    monkeypatch.setenv("FAKE_MODE", "ok")
    li.load_inline("fake_cu", "", cuda_sources="// kernel", keep_intermediates=False)
    argv = record.read_text().splitlines()
    assert [os.path.basename(a) for a in argv[-2:]] == ["main.cpp", "cuda.cu"]
    assert not os.path.exists(argv[-1]) and not os.path.exists(argv[-2])


def test_build_failure_raises_with_diagnostics(fake_anvil, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "fail")
    with pytest.raises(RuntimeError) as info:
        li.load_inline("bad_ext", "int f() { return 1 }", functions="f")
    assert str(info.value) == ("Error building extension 'bad_ext':\n"
                               "main.cpp:2:3: error: expected ; before }\n"
                               "(full build log: /tmp/fake/build.log)")


def test_a_build_the_judge_made_fails_with_its_words_said_once(fake_anvil, tmp_path, monkeypatch):
    """A defended evaluation: the candidate's process asks the judge (set_builder), which builds
    with build_spec_locally; the failure reaches the candidate with one "Error building" line."""
    monkeypatch.setenv("FAKE_MODE", "fail")
    monkeypatch.setattr(li, "_builder", lambda spec: li.build_spec_locally(spec, str(tmp_path / "inline")))
    with pytest.raises(RuntimeError) as info:
        li.load_inline("bad_ext", "int f() { return 1 }", functions="f")
    assert str(info.value).count("Error building extension") == 1, str(info.value)
    assert str(info.value).startswith("Error building extension 'bad_ext':\nmain.cpp:2:3: error")


def test_anvil_crash_without_json_raises(fake_anvil, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "crash")
    with pytest.raises(RuntimeError, match=r"exited with status 2 and printed no JSON reply\n"
                                           r"anvil: internal trouble"):
        li.load_inline("x_ext", "")


def test_missing_binary(monkeypatch, tmp_path):
    monkeypatch.delenv("ANVIL_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(li, "_CHECKOUT_BIN", str(tmp_path / "no" / "anvil"))
    assert li.find_anvil() is None
    with pytest.raises(RuntimeError, match="the anvil binary was not found"):
        li.load_inline("x", "")


def test_install_replaces_torch_load_inline():
    from torch.utils import cpp_extension

    before = cpp_extension.load_inline
    try:
        original = li.install()
        assert cpp_extension.load_inline is li.load_inline
        assert li.install() is original  # idempotent: still hands back torch's own
        assert original is before
    finally:
        cpp_extension.load_inline = before


def _real_anvil():
    path = os.environ.get("ANVIL_BIN") or os.path.normpath(li._CHECKOUT_BIN)
    if not os.access(path, os.X_OK):
        return None
    probe = subprocess.run([path, "build-sources", "--help"], capture_output=True, text=True)
    if "unknown command" in (probe.stdout + probe.stderr).lower():
        return None
    return path


@pytest.mark.skipif(_real_anvil() is None, reason="build/anvil with build-sources not built")
def test_end_to_end_cpu_extension(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("ANVIL_BIN", _real_anvil())
    module = li.load_inline("anvil_e2e_add", ADD_CPP, functions=["add"],
                            build_directory=str(tmp_path / "out"))
    a, b = torch.arange(4.0), torch.full((4,), 2.0)
    assert torch.equal(module.add(a, b), torch.tensor([2.0, 3.0, 4.0, 5.0]))


def test_empty_flags_are_not_passed():
    # KernelBench's own examples pass extra_cflags=[""]: nothing reaches anvil.
    argv = li.build_command("a", "n", "o", ["m.cpp"], extra_cflags=[""], extra_cuda_cflags=["", "-O3", "  "],
                            extra_ldflags=[""])
    assert argv == ["a", "build-sources", "--name", "n", "--out", "o", "--cuda-cflag", "-O3", "m.cpp"]


@pytest.mark.skipif(_real_anvil() is None, reason="build/anvil with build-sources not built")
def test_a_refused_flag_is_named_and_nothing_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ANVIL_BIN", _real_anvil())
    marker = tmp_path / "pwned"
    with pytest.raises(RuntimeError) as info:
        li.load_inline("anvil_e2e_wrapper", ADD_CPP, functions=["add"], build_directory=str(tmp_path / "out"),
                       extra_cflags=["-wrapper", "/bin/sh,-c,touch %s" % marker])
    message = str(info.value)
    assert message.startswith("Error building extension 'anvil_e2e_wrapper':\n"
                              'extra_cflags: "-wrapper" is not allowed (allowed: -O*, -D*, -U*, -std=*, '), message
    assert not marker.exists()


def test_install_routes_torch_load_too():
    from torch.utils import cpp_extension

    before_inline, before_load = cpp_extension.load_inline, cpp_extension.load
    try:
        li.install()
        assert cpp_extension.load is li.load
    finally:
        cpp_extension.load_inline, cpp_extension.load = before_inline, before_load


def test_load_builds_the_named_files_with_the_headers_beside_them(fake_anvil, tmp_path, monkeypatch):
    path, record = fake_anvil
    monkeypatch.setenv("FAKE_MODE", "ok")
    (tmp_path / "src").mkdir()
    for name in ("ext.cpp", "kernel.cu", "kernel.cuh", "notes.txt"):
        (tmp_path / "src" / name).write_text("// %s\n" % name)
    monkeypatch.chdir(tmp_path)
    module = li.load("fake_ext", ["src/ext.cpp", "src/kernel.cu"], extra_cflags=["-O3"],
                     build_directory=str(tmp_path / "out"))
    assert module.add(1, 2) == 3
    argv = record.read_text().splitlines()
    src = str(tmp_path / "src")
    assert argv == ["build-sources", "--name", "fake_ext", "--out", str(tmp_path / "out"),
                    "--header", os.path.join(src, "kernel.cuh"), "--cflag", "-O3",
                    os.path.join(src, "ext.cpp"), os.path.join(src, "kernel.cu")]
    with pytest.raises(ValueError, match="no sources given"):
        li.load("x", [])


def test_the_judge_builds_load_specs_from_the_candidates_own_files_only(fake_anvil, tmp_path, monkeypatch):
    """A load() spec comes from the candidate's process: the judge resolves its paths in its own
    copy of the candidate's directory and refuses any other file (absolute, .., a link out)."""
    path, record = fake_anvil
    monkeypatch.setenv("FAKE_MODE", "ok")
    root = tmp_path / "candidate"
    root.mkdir()
    (root / "ext.cpp").write_text("// ext\n")
    (tmp_path / "secret.cpp").write_text("// host file\n")
    os.symlink(str(tmp_path / "secret.cpp"), str(root / "link.cpp"))
    out = str(tmp_path / "inline")
    reply = li.build_spec_locally({"name": "ok_ext", "sources": ["ext.cpp"]}, out, str(root))
    assert reply["ok"], reply
    assert record.read_text().splitlines()[-1] == str(root / "ext.cpp")
    for bad in (str(tmp_path / "secret.cpp"), "../secret.cpp", "link.cpp"):
        reply = li.build_spec_locally({"name": "bad_ext", "sources": [bad]}, out, str(root))
        assert not reply["ok"] and "is not inside the candidate's directory" in reply["error"], reply
        assert reply["error"].startswith("Error building extension 'bad_ext':\n")
    reply = li.build_spec_locally({"name": "gone_ext", "sources": ["gone.cu"]}, out, str(root))
    assert not reply["ok"] and "the source gone.cu was not found beside the candidate" in reply["error"]


@pytest.mark.skipif(_real_anvil() is None, reason="build/anvil with build-sources not built")
def test_end_to_end_load_of_files_with_a_header(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("ANVIL_BIN", _real_anvil())
    (tmp_path / "scale.h").write_text("inline double factor() { return 3.0; }\n")
    (tmp_path / "ext.cpp").write_text('#include <torch/extension.h>\n#include "scale.h"\n'
                                      "torch::Tensor triple(torch::Tensor a) { return a * factor(); }\n"
                                      "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"triple\", &triple); }\n")
    monkeypatch.chdir(tmp_path)
    module = li.load("anvil_e2e_load", ["ext.cpp"], build_directory=str(tmp_path / "out"))
    assert torch.equal(module.triple(torch.arange(3.0)), torch.tensor([0.0, 3.0, 6.0]))
