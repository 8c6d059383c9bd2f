import os
import sys
import sysconfig

import torch

from anvil import probe_env


def test_cli_prints_all_sections(cli):
    result = cli("anvil.probe_env")
    assert result.returncode == 0, result.stderr
    out = result.json
    assert set(out) == {"python", "torch", "cudnn", "cublas", "gpus", "driver", "errors"}
    assert out["errors"] == {}

    py = out["python"]
    assert py["version"] == "%d.%d.%d" % sys.version_info[:3]
    assert py["include_dir"] == sysconfig.get_paths()["include"]
    assert py["ext_suffix"] == sysconfig.get_config_var("EXT_SUFFIX")
    assert os.path.samefile(py["executable"], sys.executable)

    t = out["torch"]
    assert t["version"] == torch.__version__
    assert t["cuda"] == torch.version.cuda
    torch_dir = os.path.dirname(torch.__file__)
    assert t["library_dir"] == os.path.join(torch_dir, "lib")
    assert t["version_file"] == os.path.join(torch_dir, "version.py")
    assert t["include_paths"][0] == os.path.join(torch_dir, "include")
    assert all(isinstance(p, str) for p in t["include_paths"])
    assert t["libraries"][:4] == ["c10", "torch", "torch_cpu", "torch_python"]
    assert ("torch_cuda" in t["libraries"]) == (torch.version.cuda is not None)
    assert t["cxx11_abi"] is bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert all(f.startswith("-DPYBIND11_") for f in t["pybind11_flags"])

    assert isinstance(out["gpus"], list)
    if not torch.cuda.is_available():
        assert out["gpus"] == []
    for gpu in out["gpus"]:
        assert set(gpu) == {"index", "name", "capability", "memory_bytes"}
        assert gpu["memory_bytes"] > 0
    assert out["driver"] is None or isinstance(out["driver"], str)


def test_cudnn_and_cublas_entries_point_at_real_files():
    for entry, header in ((probe_env.probe_cudnn(), "cudnn.h"), (probe_env.probe_cublas(), "cublas_v2.h")):
        if entry is None:
            continue
        assert os.path.isfile(os.path.join(entry["include_dir"], header))
        assert os.path.exists(os.path.join(entry["library_dir"], entry["library"]))


def test_finds_cudnn_in_a_pip_style_package(tmp_path, monkeypatch):
    pkg = tmp_path / "nvidia" / "cudnn"
    (pkg / "include").mkdir(parents=True)
    (pkg / "lib").mkdir()
    (pkg / "include" / "cudnn.h").write_text("")
    (pkg / "include" / "cudnn_version.h").write_text(
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 7\n")
    (pkg / "lib" / "libcudnn.so.8").write_text("")
    (pkg / "lib" / "libcudnn.so.9").write_text("")
    # Only the fake package: no toolkit, no system directories.
    monkeypatch.setattr(probe_env, "_cuda_home", lambda: None)
    monkeypatch.setattr(probe_env, "_pip_nvidia_roots", lambda: [str(tmp_path / "nvidia")])
    monkeypatch.setattr(probe_env, "SYSTEM_LIB_DIRS", [])
    real_isfile = os.path.isfile
    monkeypatch.setattr(os.path, "isfile",
                        lambda p: real_isfile(p) and str(p).startswith(str(tmp_path)))
    assert probe_env.probe_cudnn() == {
        "include_dir": str(pkg / "include"),
        "library_dir": str(pkg / "lib"),
        "library": "libcudnn.so.9",
        "version": "9.1.7",
    }
    assert probe_env.probe_cublas() is None


def test_a_failing_section_becomes_null_with_its_error(monkeypatch):
    def boom():
        raise OSError("no such thing\nsecond line")

    monkeypatch.setattr(probe_env, "probe_cudnn", boom)
    result = probe_env.probe()
    assert result["cudnn"] is None
    assert result["errors"] == {"cudnn": "OSError: no such thing"}
    assert result["python"]["version"]


def test_pybind11_flags_come_from_torch_attributes():
    class FakeC:
        _PYBIND11_COMPILER_TYPE = "_gcc"
        _PYBIND11_BUILD_ABI = "_cxxabi1016"

    class FakeTorch:
        _C = FakeC

    assert probe_env._pybind11_flags(FakeTorch) == [
        '-DPYBIND11_COMPILER_TYPE="_gcc"', '-DPYBIND11_BUILD_ABI="_cxxabi1016"']
