# A test that leaves the process with status 0 before any result, hoping to pass.
# unit: tests
# expect: crashed
# expect-without-audit: crashed
# expect-tests: error=1
import os
import unittest


class TestFake(unittest.TestCase):
    def test_exit_early(self):
        os._exit(0)
