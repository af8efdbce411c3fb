"""The local execution runtime behind the ``subprocess`` backend.

``isolation`` decides how a command is confined (namespaces through bubblewrap, or rlimits
alone), ``limits``, ``cgroup`` and ``disk`` bound what it and its sandbox may consume, and
``supervisor`` runs one command under all of that, with capped output, a wall-clock timeout and
a kill of everything it started.
"""
