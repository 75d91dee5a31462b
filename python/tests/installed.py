"""The PyTorch tests run against the package the README's install put into the
venv (pip install --no-build-isolation ./python), not a build folder: under
CTest (RCOLL_TEST_INSTALLED=1, torch_readme_install_ddp installed it first)
a test whose `rcoll` comes from anywhere but site-packages fails at once."""
import os
import sys


def check():
    if os.environ.get("RCOLL_TEST_INSTALLED") != "1":
        return
    import rcoll

    where = os.path.dirname(os.path.abspath(rcoll.__file__))
    if os.path.basename(os.path.dirname(where)) != "site-packages":
        sys.exit(f"FAIL: rcoll imports from {where}, not the installed package (site-packages)")
