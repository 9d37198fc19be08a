#!/usr/bin/env python
"""Django's command-line entry for the CMS environment (see cms_site/settings.py).

It runs with string hashing unrandomised (PYTHONHASHSEED=0, by re-executing itself once): Wagtail writes
its reference index from Python sets, whose order would otherwise differ on every run -- the same seed
would give different rows, and a page would list the same references in another order.
"""
import os
import sys

if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cms_site.settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
