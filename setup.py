"""Builds the simulator's compiled core (sim/native.py says what and why) with mypyc.

Everything else about the package is in pyproject.toml. `SIM_PURE_PYTHON=1 pip install -e .`
skips the compilation (the sources run as they are, 2-3x slower); `SIM_REQUIRE_COMPILED=1` makes
a failed compilation fail the install (CI) instead of installing the sources alone."""

import os
import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

native = runpy.run_path(os.path.join("sim", "native.py"))
# the sources' digests before mypyc reads them: the build's record (sim/native.py, source_digests)
built_from = native["source_digests"]()
ext_modules = []
if os.environ.get(native["PURE_ENV"]) != "1":
    from mypyc.build import mypycify

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
        # no C compiler or Python headers: warn and install the sources alone (sim.native then
        # runs them; `sim bench` reports which core ran), unless the compiled core is required
        ext.optional = os.environ.get(native["REQUIRE_ENV"]) != "1"


class BuildCore(build_ext):
    """build_ext, then the record of the sources the core was built from (sim.native's staleness check)."""

    def run(self):
        super().run()
        compiled = [e for e in self.extensions if e.name in native["COMPILED"]]
        if compiled and all(os.path.exists(self.get_ext_fullpath(e.name)) for e in compiled):
            build_py = self.get_finalized_command("build_py")
            package_dir = (
                build_py.get_package_dir("sim") if self.inplace else os.path.join(self.build_lib, "sim")
            )
            native["write_manifest"](Path(package_dir), built_from)


setup(ext_modules=ext_modules, cmdclass={"build_ext": BuildCore})
