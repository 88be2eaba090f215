# Tests whose failure message and skip reason hold lone surrogates.
# unit: tests
# expect: ok
# expect-without-audit: ok
# expect-tests: failed=1 skipped=1 passed=1
import unittest


class Surrogates(unittest.TestCase):
    def test_fails(self):
        self.assertEqual("\ud800", "\udfff", "message \udc80")

    @unittest.skip("reason \ud834")
    def test_skipped(self):
        pass

    def test_passes(self):
        self.assertTrue("\ud800")
