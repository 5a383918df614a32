"""People's accounts: the rules around their rows (rules.py), names and passwords
(passwords.py), the sign-in limiter (limiter.py), setting the app up (setup.py)."""
