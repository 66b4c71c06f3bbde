"""Where the embedded API server listens unless told otherwise: shared by the server and every
client, in a module light enough for the agent to import."""

EMBEDDED_HOST = "127.0.0.1"
EMBEDDED_PORT = 6443
EMBEDDED_URL = f"http://{EMBEDDED_HOST}:{EMBEDDED_PORT}"
