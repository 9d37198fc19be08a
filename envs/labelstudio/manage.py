#!/usr/bin/env python
"""Django's command-line entry for the annotation-studio environment (see studio_site/settings.py), run by
the Python of .venv-labelstudio (`make labelstudio`): Label Studio pins its own Django stack.

Label Studio imports its apps as top-level modules (`core`, `projects`, `tasks`, ...), as its own manage.py
does from inside the package: the package's folder goes on the path first.
"""
import os
import sys

if __name__ == "__main__":
    # string hashing unrandomised (by re-executing itself once): Label Studio stores hash() of a project's
    # labelling config (label_config_hash), which would differ between two builds of a seed
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    import label_studio
    sys.path.insert(0, os.path.dirname(label_studio.__file__))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "studio_site.settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
