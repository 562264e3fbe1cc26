# The GoogleTest unit tests as a lit suite of their own; they live in the build tree.
import os

import lit.formats

config.name = "tpc-unit"
config.test_format = lit.formats.GoogleTest(".", "tests")
config.test_source_root = os.path.join(config.tpc_obj_root, "test", "unit")
config.test_exec_root = config.test_source_root

# The same per-test timeout as the regression tests (test/lit.cfg.py).
if lit_config.maxIndividualTestTimeIsSupported[0]:
    lit_config.maxIndividualTestTime = int(os.environ.get("TPC_TEST_TIMEOUT", "600"))
