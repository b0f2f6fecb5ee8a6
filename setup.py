"""setuptools entry point; the project's metadata and configuration are in pyproject.toml.

Its one job: an editable install (``pip install -e .``) of this layout, where ``plugins/`` installs as the package
``dpaudit_plugins`` (``package-dir``), makes setuptools install through a meta-path finder, and setuptools then
always emits an ``InformationOnly`` warning ("Editable installation ... Please be careful with folders in your
working directory with the same name as your package"), which pip prints as a build-backend warning. It does not
apply here: the only such folder in the checkout is ``dpaudit/``, the package itself, and ``plugins/`` is not an
importable name (tests/test_packaging.py checks that). That one warning is filtered; every other is shown.
"""

import warnings

from setuptools import setup
from setuptools.warnings import InformationOnly

warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)
setup()
