#!/usr/bin/env python
"""Django's command-line entry for the helpdesk environment (see desk_site/settings.py)."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "desk_site.settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
