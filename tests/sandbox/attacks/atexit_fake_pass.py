# Registers an atexit handler that prints a fake success, then fails a test.
# unit: tests
# expect: ok
# expect-without-audit: ok
# expect-tests: failed=1
import atexit
import sys
import unittest

atexit.register(lambda: print("OK: all tests passed"))


class TestFake(unittest.TestCase):
    def test_fails(self):
        self.assertEqual(1, 2)

    def tearDown(self):
        sys.stdout.write("Ran 1 test\n\nOK\n")
