"""Builds the simulator's compiled core (sim/native.py says what and why) with mypyc.

Everything else about the package is in pyproject.toml. `SIM_PURE_PYTHON=1 pip install -e .`
skips the compilation (the sources run as they are, 2-3x slower)."""

import os
import runpy

from setuptools import setup

ext_modules = []
if os.environ.get("SIM_PURE_PYTHON") != "1":
    from mypyc.build import mypycify

    native = runpy.run_path(os.path.join("sim", "native.py"))
    ext_modules = mypycify(
        [
            # types of third-party modules are not needed and must not depend on what the
            # build environment happens to have installed
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--no-site-packages",
            *(module.replace(".", "/") + ".py" for module in native["COMPILED"]),
        ],
        opt_level="3",
        group_name="sim_core",
    )
    for ext in ext_modules:
        # no C compiler or Python headers: warn and install the sources alone (sim.native
        # then runs them; `sim bench` reports which core ran)
        ext.optional = True

setup(ext_modules=ext_modules)
