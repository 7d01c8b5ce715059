"""duro's faces: the ``duro`` command line (and, later, the dev server and Studio)."""
