"""The first plugin pytest loads (pyproject.toml: `pythonpath` and `-p suite_start`), in the controller
and in every xdist worker, before the plugins installed packages bring (nbval among them).

nbval imports nbformat, which imports jsonschema, which imports rfc3987_syntax when it is installed (it
comes with Jupyter, through jsonschema[format-nongpl]) to check the "iri" string format. That module
builds a Lark grammar as it is imported: 0.9 s of CPU in each of a run's five pytest processes, for a
format nothing here validates (a notebook's schema has no IRI in it). Marked as missing, it is never
imported, and jsonschema leaves that one format unchecked, as it does wherever the module is not
installed. The steps, the notebooks' kernels and the workbook never import jsonschema at all.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # None in sys.modules: `import` raises ImportError
