"""The course's later steps, s07 to s11: lessons like the six at the root, which they import and extend.

The root holds the six a student reads in order; these go on from s06 (a pause, a stop hook, a full
context, a Ctrl-C, a trace, a fresh session). Each runs from the repository's root as a module:
`python -m workbook.later.s07_really_done`. Nothing else in the package imports them.
"""
