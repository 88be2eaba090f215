# A test that exits the interpreter with status 0 instead of asserting.
# unit: tests
# expect: ok
# expect-without-audit: ok
# expect-tests: error=1
import sys
import unittest


class TestExit(unittest.TestCase):
    def test_exit(self):
        sys.exit(0)
