"""Contest judging: programs reading stdin, judged on their stdout, as Codeforces, CodeContests,
APPS/TACO, LiveCodeBench and IOI data pose them.

``formats`` reads a dataset row's test cases in the shapes those datasets use; ``languages``
is the table of languages a program may come in; ``checkers`` judge one test's output against
its answer (tokens, floats, a host function, a checker program); ``scoring`` turns the per-test
results of a :class:`~sandboxkit.harness.StdioTests` run into a score (fraction,
all-or-nothing, IOI subtasks); ``calls`` judges call-based problems (a function called on each
test's arguments) through the function-test machinery.
"""
