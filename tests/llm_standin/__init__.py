"""A scripted OpenAI-compatible server, a test stand-in for paid model APIs."""
