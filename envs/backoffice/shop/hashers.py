"""The sandbox's password hasher: MD5 with a fixed salt.

A user created during an episode (create-staff-user) has their salt and hash shown on their change page;
with Django's random salt that screenshot came out different on every run. Seeded users keep their own
seeded salts (seed.py). Unsafe anywhere but a local test environment, like MD5 itself.
"""
from django.contrib.auth.hashers import MD5PasswordHasher


class FixedSaltMD5PasswordHasher(MD5PasswordHasher):
    algorithm = "md5"   # the same algorithm name: the seeded "md5$..." hashes still verify

    def salt(self):
        return "magsandboxfixedsalt000"   # 22 characters, like Django's own salts
