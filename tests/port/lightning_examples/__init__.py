"""Three Lightning 2.x projects, written with Lightning's imports, that the port tests run twice.

Not imported as modules: `tests/port/porting.py` reads each file's text, renames the imports for
Lockstep (and only them) and executes it. Each file defines `main(root_dir, **trainer_kwargs)`
returning `(model, trainer)`.
"""
