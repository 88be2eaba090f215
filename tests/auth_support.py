"""The bearer token the tests' services accept, and the header that sends it."""
TOKEN = "tests-token-7f3a9c"
API_TOKENS = f"tests:{TOKEN}"
AUTHORIZATION = {"Authorization": f"Bearer {TOKEN}"}
# A token of each role but the operator's (TOKEN's entry has no role: an operator).
ROLE_TOKENS = {"reviewer": "tok-rev-19af", "service": "tok-svc-6c02"}
