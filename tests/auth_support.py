"""The bearer token the tests' services accept, and the header that sends it."""
TOKEN = "tests-token-7f3a9c"
API_TOKENS = f"tests:{TOKEN}"
AUTHORIZATION = {"Authorization": f"Bearer {TOKEN}"}
