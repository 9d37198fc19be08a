"""The sandbox's password hasher: MD5 with a fixed salt, so a password set during an episode gives the
same screenshot on every run and seeding a dozen users costs no PBKDF2 seconds. Unsafe anywhere but a
local test environment, like MD5 itself."""
from django.contrib.auth.hashers import MD5PasswordHasher


class FixedSaltMD5PasswordHasher(MD5PasswordHasher):
    algorithm = "md5"

    def salt(self):
        return "magsandboxfixedsalt000"
