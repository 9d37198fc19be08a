"""Print every row of every table as canonical JSON: the fingerprint of a database's state.

  MAG_DJANGO_DB=/tmp/bo.sqlite3 python manage.py dump

Tables sorted by name, columns by name, rows by id (then all columns), ids included, so two databases
with the same content print the same bytes. Left out, because they hold wall-clock times rather
than content: django_migrations (when each migration was applied) and django_session.
"""
import json

from django.core.management.base import BaseCommand
from django.db import connection

VOLATILE = {"django_migrations", "django_session"}


class Command(BaseCommand):
    help = "Print all rows of all tables as canonical JSON."

    def handle(self, *args, **options):
        dump = {}
        with connection.cursor() as cur:
            for table in sorted(set(connection.introspection.table_names()) - VOLATILE):
                cols = sorted(c.name for c in connection.introspection.get_table_description(cur, table))
                q = connection.ops.quote_name
                order = ["id"] * ("id" in cols) + cols   # by primary key first, ties by every column
                cur.execute(f"SELECT {', '.join(map(q, cols))} FROM {q(table)} "
                            f"ORDER BY {', '.join(map(q, order))}")
                dump[table] = [dict(zip(cols, row)) for row in cur.fetchall()]
        self.stdout.write(json.dumps(dump, sort_keys=True, default=str))
