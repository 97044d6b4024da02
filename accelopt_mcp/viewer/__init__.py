"""`accelopt view`: a local web app over the kernel database (runs, their lineage, each kernel's
code, diff, profile, LLM calls and lessons, the memory, the suites).

- `views/` reads the store into pydantic views (what the JSON endpoints return), one module a
  page; it never raises on a broken run: a view says what it could not read (`problems`).
- `app.py` is the Starlette app: the token gate, the Host check, the JSON endpoints, the
  static front end (`static/`: plain JavaScript and SVG, no build step, nothing fetched from
  the network).
- `links.py` records where a viewer of a database listens (no token), so that `accelopt
  optimize` and the `job_status` tool can point at a run in it.
- `serve.py` binds 127.0.0.1, prints the URL with its token, opens the browser through a
  private redirect file (no token on a command line) and serves until stopped.
"""
