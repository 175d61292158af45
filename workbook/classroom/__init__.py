"""The classroom: the replay server for a class, and the grader with its sandbox."""
