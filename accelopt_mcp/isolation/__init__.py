"""Running code we do not trust in a child process with limits: no records, no backends, no
tasks here, only processes, their resources and what they leave behind. Measurement lives in the
backends that use it."""
