"""People's accounts: the rules around their rows (rules.py), names and passwords
(passwords.py), the sign-in limiter (limiter.py), setting the app up (setup.py), the API's
keys and who may use the API (api_keys.py), invitation links (invitations.py), daily token
limits (usage.py)."""
