"""duro inside other frameworks: one module per framework, each needing that framework's extra
(``duro.contrib.starlette``, for Starlette and FastAPI apps: ``pip install 'duro[dev]'``)."""
