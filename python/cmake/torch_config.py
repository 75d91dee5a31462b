"""Writes what CMake needs to build against the installed torch, as set() lines.

usage: python torch_config.py OUT.cmake
On failure (no torch, or an unusable one) writes RCOLL_TORCH_FOUND OFF and the reason.
"""
import sys
import sysconfig


def main(out_path):
    lines = []

    def put(name, value):
        value = str(value).replace("\\", "/").replace('"', '\\"')
        lines.append(f'set({name} "{value}")')

    try:
        import torch
        import torch.distributed as dist
        from torch.utils import cpp_extension
    except Exception as e:  # noqa: BLE001 - any import failure means "no torch here"
        put("RCOLL_TORCH_FOUND", "OFF")
        put("RCOLL_TORCH_REASON", f"torch does not import with {sys.executable}: {e}")
    else:
        major = int(torch.__version__.split(".")[0])
        if major < 2 or not dist.is_available():
            put("RCOLL_TORCH_FOUND", "OFF")
            put("RCOLL_TORCH_REASON", f"torch {torch.__version__} at {sys.executable} is not 2.x with torch.distributed")
        else:
            put("RCOLL_TORCH_FOUND", "ON")
            put("RCOLL_TORCH_VERSION", torch.__version__)
            put("RCOLL_TORCH_INCLUDE_DIRS", ";".join(cpp_extension.include_paths()))
            put("RCOLL_TORCH_LIBRARY_DIR", cpp_extension.library_paths()[0])
            put("RCOLL_TORCH_CXX11_ABI", int(torch._C._GLIBCXX_USE_CXX11_ABI))
            put("RCOLL_TORCH_GLOO", "ON" if dist.is_gloo_available() else "OFF")
            put("RCOLL_PYTHON_INCLUDE_DIR", sysconfig.get_paths()["include"])
            put("RCOLL_PYTHON_EXT_SUFFIX", sysconfig.get_config_var("EXT_SUFFIX"))
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
