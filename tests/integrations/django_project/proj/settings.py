"""Settings: the database is PERDURE_DATABASE_URL, its tables in schema PERDURE_SCHEMA."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["PERDURE_DATABASE_URL"])

SECRET_KEY = "perdure-tests"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["perdure.integrations.django", "shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", "postgres"),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        # Django's tables live next to perdure's, in the test's own schema.
        "OPTIONS": {"options": f"-c search_path={os.environ['PERDURE_SCHEMA']}"},
    }
}
PERDURE_APP = "proj.workflows:app"
