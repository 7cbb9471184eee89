"""`python -m app`, and the script a PyInstaller bundle freezes as the `ember` executable.

`multiprocessing.freeze_support()` comes first, before anything of the app is imported: a
frozen Ember is its own Python, so the engine worker (spawned) and multiprocessing's resource
tracker start the `ember` executable again with their own arguments, and freeze_support()
runs them and exits instead of letting them into the CLI (which would reject the arguments
with exit code 2). Outside a bundle it does nothing.
"""

import multiprocessing

if __name__ == "__main__":
    multiprocessing.freeze_support()

    from app.cli import main

    main()
