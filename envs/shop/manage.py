#!/usr/bin/env python
"""Django's command-line entry for the shop environment (see shop_site/settings.py)."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_site.settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
