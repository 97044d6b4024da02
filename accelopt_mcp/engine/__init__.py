"""The AccelOpt engine: planner, executor, summarizer, memory, beam search, jobs."""
