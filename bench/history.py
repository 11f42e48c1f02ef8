"""Are the rules right on real history? Review the last commits of real Python repositories, no model.

The noise bench (bench/noise.py) asks how much a review says about released code; this one asks
whether what it says is *right*, on the changes real maintainers made: for each of several open-source
repositories, kept as local git mirrors, the last N first-parent commits that change Python code are
reviewed one at a time exactly as `reviewloop review MIRROR --base C~1 --head C` does (the real
pipeline, no model, no database). Every finding the verifier labels REAL is recorded with its
repository and commit, so a person can read the code and judge it; the judgements live in a JSON
file beside this module (`history_judgements.json`) and the report joins them to the findings.

Mirrors are bare git directories laid out as `ROOT/OWNER+NAME/repo` (what the session's `fetch`
tool makes of `github:OWNER/NAME`; `git clone --mirror https://github.com/OWNER/NAME ROOT/OWNER+NAME/repo`
makes the same).

    python -m bench.history --mirrors /work/.mirror                 # print the report
    python -m bench.history --mirrors /work/.mirror --per-repo 40 --json out.json
    python -m bench.history --render out.json                       # re-render with the judgements
    python -m bench.history --mirrors /work/.mirror --held-out      # the repositories no rule was tuned on

Lines changed: added plus deleted lines of `.py` files, the code a reviewer reads. A commit whose
Python change is larger than MAX_COMMIT_LINES (a reformat, a vendored library) is left out and
counted as skipped: one such commit would dominate the line count and says little about a rule.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from agent.pipeline import ReviewOutcome

REPOSITORIES = (
    "pallets/flask", "psf/requests", "encode/httpx", "pallets/click", "django/asgiref",
    "python-attrs/attrs", "pypa/packaging", "aio-libs/yarl", "benoitc/gunicorn", "Textualize/rich",
)  # fmt: skip
# Never used to tune a rule: reviewed apart (`--held-out`), they say whether the rules fixed on
# REPOSITORIES are right on code nobody tuned them to, or only on the findings that were seen.
HELD_OUT = (
    "CodeForPhilly/chime", "pyodide/pyodide-build", "evidentlyai/evidently", "feast-dev/feast", "dlt-hub/dlt",
)  # fmt: skip
# Earlier held-out sets, oldest first: each measured once as held out, then its findings tuned rules
# (disclosed in RESULTS.md), so it no longer says anything about unseen code. Kept to show the before
# and after, and never to be used as held out again.
SPENT_HELD_OUT = (
    ("pallets/werkzeug", "pallets/jinja", "Pylons/waitress", "marshmallow-code/marshmallow", "hynek/structlog"),
    ("encode/starlette", "urllib3/urllib3", "pallets/itsdangerous", "pytest-dev/pluggy", "encode/uvicorn"),
    ("python-jsonschema/jsonschema", "aio-libs/multidict", "sqlalchemy/alembic", "tiangolo/typer",
     "pallets/markupsafe"),
    ("pypa/build", "tox-dev/filelock", "Delgan/loguru", "jazzband/pip-tools", "pytest-dev/pytest-mock"),
    ("jd/tenacity", "agronholm/anyio", "Kludex/python-multipart", "sdispater/pendulum", "python-poetry/tomlkit"),
    ("theskumar/python-dotenv", "python-hyper/h11", "aio-libs/frozenlist", "pyca/pyopenssl", "psf/pyperf"),
    ("mahmoud/boltons", "pytest-dev/pytest-xdist", "python-jsonschema/referencing", "hukkin/tomli",
     "aio-libs/aiosignal"),
    ("encode/databases", "pallets-eco/blinker", "python-humanize/humanize", "scrapy/w3lib", "mahmoud/glom"),
    ("jpadilla/pyjwt", "pallets-eco/flask-sqlalchemy", "miguelgrinberg/python-socketio", "fastapi/sqlmodel",
     "python-attrs/cattrs"),
    ("pallets/quart", "lepture/authlib", "encode/httpcore", "aio-libs/aiohttp-session", "Pylons/pyramid"),
    ("encode/django-rest-framework", "jazzband/django-oauth-toolkit", "python-social-auth/social-core",
     "pydantic/pydantic-settings", "aio-libs/aiohttp-jinja2"),
    ("pallets-eco/flask-wtf", "maxcountryman/flask-login", "django/channels", "aio-libs/async-timeout",
     "sqlalchemy/mako"),
    ("pallets-eco/flask-security", "mozilla/bleach", "python-hyper/hyper-h2", "aio-libs/aiomcache",
     "pallets-eco/flask-caching"),
    ("marshmallow-code/webargs", "pallets-eco/wtforms", "Pylons/webob", "pgjones/hypercorn", "Tinche/aiofiles"),
    ("python-babel/flask-babel", "Pylons/colander", "pytest-dev/pytest-asyncio", "aio-libs/aiohttp-sse",
     "jazzband/django-redis"),
    ("pallets-eco/flask-session", "Pylons/deform", "aio-libs/aiohttp-cors", "jazzband/django-model-utils",
     "pytest-dev/pytest-timeout"),
    ("python-hyper/wsproto", "marshmallow-code/apispec", "jazzband/django-debug-toolbar", "pytest-dev/pytest-cov",
     "omnilib/aiosqlite"),
    ("corydolphin/flask-cors", "jazzband/django-axes", "jazzband/tablib", "Pylons/hupper",
     "pytest-dev/pytest-rerunfailures"),
    ("jazzband/django-silk", "pallets-eco/flask-debugtoolbar", "aio-libs/aiodns", "pytest-dev/pytest-django",
     "python-hyper/hpack"),
    ("jazzband/django-constance", "jazzband/django-taggit", "Pylons/pyramid_tm", "aio-libs/aiozipkin",
     "pytest-dev/pytest-randomly"),
    ("marshmallow-code/marshmallow-sqlalchemy", "jazzband/django-polymorphic", "aio-libs/aiohttp-remotes",
     "pytest-dev/pytest-bdd", "jazzband/django-auditlog"),
    ("jazzband/django-simple-history", "Pylons/pyramid_debugtoolbar", "jazzband/django-formtools",
     "pytest-dev/pytest-html", "jazzband/django-waffle"),
    ("jazzband/djangorestframework-simplejwt", "jazzband/django-defender", "aio-libs/aiohttp-security",
     "pytest-dev/pytest-subtests", "jazzband/django-push-notifications"),
    ("jazzband/django-two-factor-auth", "jazzband/dj-database-url", "Pylons/webtest", "python-hyper/rfc3986",
     "pytest-dev/pytest-xprocess"),
    ("jazzband/django-hosts", "jazzband/prettytable", "aio-libs/aiohttp-devtools", "pytest-dev/pytest-instafail",
     "marshmallow-code/marshmallow-oneofschema"),
    ("jazzband/django-invitations", "jazzband/geojson", "aio-libs/janus", "pytest-dev/pytest-repeat",
     "jazzband/django-widget-tweaks"),
    ("jazzband/django-downloadview", "jazzband/django-embed-video", "jazzband/django-analytical",
     "Pylons/pyramid_retry", "jazzband/django-categories"),
    ("jazzband/django-pipeline", "Pylons/pyramid_jinja2", "jazzband/django-dbbackup", "pytest-dev/execnet",
     "aio-libs/aioftp"),
    ("jazzband/django-rest-knox", "pytest-dev/pytest-qt", "Pylons/pyramid_mailer", "jazzband/django-queued-storage",
     "python-hyper/hyperlink"),
    ("pytest-dev/pytest-localserver", "jazzband/django-mongonaut", "jazzband/contextlib2",
     "jazzband/django-redshift-backend"),
    ("jazzband/django-tinymce", "jazzband/django-smart-selects", "pytest-dev/pytest-env", "aio-libs/aiomonitor",
     "Pylons/pyramid_exclog"),
    ("jazzband/django-payments", "aio-libs/aiohttp-debugtoolbar", "jazzband/django-floppyforms",
     "python-hyper/priority", "jazzband/django-fsm-log"),
    ("jazzband/django-sortedm2m", "jazzband/django-configurations", "pytest-dev/pytest-nunit", "aio-libs/aiohttp-mako",
     "Pylons/pyramid_chameleon"),
    ("jazzband/django-user-sessions", "jazzband/django-dbtemplates", "aio-libs/aiorwlock",
     "jazzband/django-permission"),
    ("jazzband/django-admin2", "jazzband/django-discover-jenkins", "aio-libs/aiozmq", "jazzband/django-nose",
     "pytest-dev/pytest-cpp", "Pylons/venusian"),
    ("jazzband/django-robots", "jazzband/django-simple-menu", "pytest-dev/pytest-print",
     "Pylons/pyramid_nacl_session", "aio-libs/aiojobs"),
    ("jazzband/django-newsletter", "jazzband/django-recurrence", "pytest-dev/pytest-forked", "aio-libs/aiocache",
     "Pylons/plaster"),
    ("jazzband/sorl-thumbnail", "pytest-dev/pytest-order", "aio-libs/aiopg", "Pylons/plaster_pastedeploy",
     "python-hyper/hyperframe"),
    ("jazzband/django-authority", "pytest-dev/pytest-metadata", "aio-libs/aiomysql", "Pylons/translationstring",
     "jazzband/django-cookie-consent"),
    ("jazzband/django-eav2", "pytest-dev/pytest-twisted", "aio-libs/aiodocker", "Pylons/pyramid_layout",
     "jazzband/django-revproxy"),
    ("jazzband/jsonmodels", "pytest-dev/pytest-flask", "pytest-dev/pytest-factoryboy", "jazzband/django-avatar"),
    ("jazzband/django-tagging", "pytest-dev/pytest-describe", "aio-libs/aiokafka", "Pylons/substanced",
     "jazzband/icalevents"),
    ("jazzband/django-ical", "pytest-dev/pytest-splinter", "aio-libs/aiobotocore", "Pylons/peppercorn",
     "python-hyper/brotlicffi"),
    ("jazzband/django-flatblocks", "pytest-dev/pytest-base-url", "aio-libs/aiosmtpd", "Pylons/pyramid_zcml",
     "pytest-dev/unittest2pytest"),
    ("jazzband/django-voting", "pytest-dev/pyfakefs", "aio-libs/async-lru", "Pylons/pylons",
     "pytest-dev/pytest-reportlog"),
    ("pytest-dev/apipkg", "aio-libs/sockjs", "aio-libs/aiohappyeyeballs", "pytest-dev/pytest-selenium",
     "pytest-dev/pytest-variables"),
    ("aio-libs/aiohttp-demos", "pytest-dev/iniconfig"),
    ("celery/kombu", "pypa/wheel", "sqlalchemy/dogpile.cache", "python-trio/trio-websocket",
     "django-compressor/django-compressor"),
    ("celery/vine", "pypa/setuptools_scm", "hynek/argon2-cffi", "encode/orm", "django-webtest/django-webtest"),
    ("celery/py-amqp", "pypa/twine", "hynek/doc2dash", "encode/typesystem", "jieter/django-tables2"),
    ("celery/django-celery-beat", "pypa/readme_renderer", "python-trio/outcome", "mitsuhiko/pluginbase",
     "pallets-eco/flask-admin"),
    ("celery/django-celery-results", "pypa/pyproject-hooks", "python-validators/validators", "boto/s3transfer",
     "ionelmc/pytest-benchmark"),
    ("ionelmc/python-hunter", "celery/billiard", "pallets-eco/flask-mail", "hynek/prometheus-async"),
    ("pypa/virtualenv", "hynek/stamina", "python-trio/trio-asyncio", "ionelmc/python-lazy-object-proxy",
     "django/daphne"),
    ("pypa/installer", "hynek/environ-config", "python-trio/pytest-trio", "ionelmc/python-manhole",
     "django/django-localflavor"),
    ("pypa/pipx", "python-trio/sniffio", "ionelmc/python-tblib", "django/django-contrib-comments",
     "getsentry/responses"),
    ("pypa/cibuildwheel", "encode/broadcaster", "ionelmc/python-aspectlib", "spulec/freezegun", "Suor/funcy"),
    ("pypa/distlib", "Suor/django-cacheops", "pyca/bcrypt", "lepture/mistune", "un33k/python-slugify"),
    ("getlogbook/logbook", "celery/django-celery", "boto/boto3", "pallets-eco/flask-principal"),
    ("aio-libs/aioredis-py", "ionelmc/python-fields", "hynek/pem", "celery/sphinx_celery", "pypa/bandersnatch"),
    ("ionelmc/python-remote-pdb", "celery/case", "pypa/pyproject-metadata", "python-trio/trio-typing",
     "python-babel/babel"),
    ("ionelmc/python-redis-lock", "pypa/trove-classifiers", "python-trio/unasync", "lepture/python-livereload",
     "django/channels_redis"),
    ("python-trio/trustme", "lepture/flask-oauthlib", "getsentry/milksnake", "pytest-dev/py", "hynek/first"),
    ("pypa/sampleproject", "ionelmc/python-signalfd", "Suor/handy", "getsentry/raven-python",
     "pallets-eco/flask-openid"),
    ("jaraco/keyring", "mahmoud/lithoxyl", "pyeve/eve", "sloria/environs", "kennethreitz/records"),
    ("jaraco/zipp", "mahmoud/face", "marshmallow-code/flask-marshmallow", "sloria/doitlive", "kennethreitz/maya"),
    ("jaraco/inflect", "marshmallow-code/marshmallow-jsonapi", "sloria/konch", "wntrblm/nox", "aio-libs/propcache"),
    ("jaraco/tempora", "joke2k/django-environ", "pytest-dev/pytest-runner", "jaraco/path", "sloria/sphinx-issues"),
    ("jaraco/jaraco.functools", "pyeve/events", "keleshev/schema", "asottile/pyupgrade", "PyCQA/pyflakes"),
    ("jaraco/irc", "lovasoa/marshmallow_dataclass", "docopt/docopt", "asottile/reorder-python-imports",
     "PyCQA/mccabe"),
    ("jaraco/jaraco.text", "mgedmin/check-manifest", "asottile/add-trailing-comma", "PyCQA/pep8-naming",
     "hhatto/autopep8"),
    ("asottile/yesqa", "PyCQA/flake8-bugbear", "PyCQA/autoflake", "mahmoud/ashes",
     "python-jsonschema/check-jsonschema", "dahlia/libsass-python"),
    ("jaraco/jaraco.classes", "asottile/dead", "mgedmin/objgraph", "kennethreitz/background",
     "marshmallow-code/apispec-webframeworks"),
    ("asottile/setup-cfg-fmt", "jaraco/jaraco.context", "mgedmin/findimports", "asottile/astpretty",
     "python-trio/flake8-async"),
    ("asottile/tokenize-rt", "jaraco/jaraco.collections", "mgedmin/restview", "jaraco/jaraco.logging",
     "hynek/argon2-cffi-bindings"),
    ("asottile/all-repos", "mgedmin/check-python-versions", "mgedmin/irclog2html", "jaraco/jaraco.itertools",
     "asottile/babi"),
    ("jaraco/jaraco.stream", "asottile/git-code-debt", "mgedmin/zodbbrowser", "pre-commit/identify",
     "jaraco/jaraco.ui"),
    ("asottile/future-fstrings", "tqdm/tqdm", "more-itertools/more-itertools", "PyCQA/isort", "PyCQA/bandit"),
    ("msiemens/tinydb", "cool-RR/PySnooper", "tartley/colorama", "dateutil/dateutil", "pyparsing/pyparsing"),
    ("chardet/chardet", "paramiko/paramiko", "pyinvoke/invoke", "Python-Markdown/markdown", "jendrikseipp/vulture"),
    ("mitmproxy/pdoc", "python-poetry/cleo", "python-poetry/poetry-core", "amoffat/sh", "tomerfiliba/plumbum"),
    ("erikrose/parsimonious", "lark-parser/lark", "dabeaz/ply", "executablebooks/markdown-it-py",
     "PyCQA/docformatter"),
    ("PyCQA/pydocstyle", "PyCQA/flake8", "PyCQA/pycodestyle", "pyca/service-identity", "pyca/pynacl"),
    ("hynek/svcs", "sloria/TextBlob", "pre-commit/pre-commit-hooks", "ekalinin/nodeenv", "asottile/classify-imports"),
    ("asottile/covdefaults", "jaraco/jaraco.envs", "jaraco/jaraco.packaging", "jaraco/jaraco.net"),
    ("mgedmin/imgdiff", "python-trio/async_generator", "benjaminp/six", "certifi/python-certifi", "httpie/cli"),
    ("sphinx-doc/alabaster", "Pyrlang/Pyrlang", "carltongibson/django-filter", "pyeve/cerberus", "fabric/fabric"),
    ("Kozea/tinycss2", "Kozea/cssselect2", "Kozea/cairocffi", "scrapy/parsel", "scrapy/itemadapter"),
    ("scrapy/queuelib", "scrapy/cssselect", "simplejson/simplejson", "wbond/asn1crypto", "pexpect/pexpect"),
    ("pexpect/ptyprocess", "jquast/blessed", "jquast/wcwidth", "prompt-toolkit/ptpython",
     "zopefoundation/zope.interface"),
    ("zopefoundation/transaction", "zopefoundation/persistent", "zopefoundation/zope.component",
     "zopefoundation/BTrees", "tox-dev/pipdeptree"),
    ("tox-dev/platformdirs", "tox-dev/tox", "psf/cachecontrol", "python/typing_extensions", "nedbat/coveragepy"),
    ("PyCQA/prospector", "PyCQA/eradicate", "PyCQA/doc8", "PyCQA/redbaron"),
    ("coleifer/peewee", "coleifer/huey", "coleifer/walrus", "MagicStack/asyncpg", "python-websockets/websockets"),
    ("samuelcolvin/arq", "falconry/falcon", "bottlepy/bottle", "cherrypy/cherrypy", "tornadoweb/tornado"),
    ("gevent/gevent", "eventlet/eventlet", "nose-devs/nose", "nose-devs/nose2", "testing-cabal/mock"),
    ("testing-cabal/testtools", "testing-cabal/fixtures", "joke2k/faker", "FactoryBoy/factory_boy",
     "kevin1024/vcrpy"),
    ("gabrielfalcao/HTTPretty", "dabeaz/curio", "dabeaz/sly", "python-trio/trio", "agronholm/apscheduler"),
    ("agronholm/typeguard", "agronholm/sqlacodegen", "agronholm/cbor2", "zopefoundation/zope.schema",
     "zopefoundation/ZODB"),
    ("psf/black", "pytest-dev/pytest", "sphinx-doc/sphinx", "flask-restful/flask-restful",
     "python-restx/flask-restx"),
    ("celery/celery", "scrapy/scrapy", "boto/boto", "Supervisor/supervisor", "networkx/networkx"),
    ("aio-libs/aiohttp", "Textualize/textual", "pyserial/pyserial", "pyusb/pyusb", "sshuttle/sshuttle"),
    ("borgbackup/borg", "beetbox/beets", "django-mptt/django-mptt", "django-extensions/django-extensions",
     "django-guardian/django-guardian"),
    ("django-import-export/django-import-export", "django-crispy-forms/django-crispy-forms",
     "django-haystack/django-haystack", "pyupio/safety", "python-semver/python-semver"),
    ("jd/daiquiri", "kvesteri/sqlalchemy-utils", "graphql-python/graphene", "graphql-python/graphql-core",
     "spyder-ide/qtpy"),
    ("Kozea/Radicale", "Kozea/WeasyPrint", "html5lib/html5lib-python", "python-lsp/python-lsp-server",
     "davidhalter/jedi"),
    ("davidhalter/parso", "trentm/python-markdown2", "yaml/pyyaml", "uiri/toml", "hukkin/tomli-w"),
    ("jmespath/jmespath.py", "kjd/idna", "pypa/pip", "pypa/setuptools", "pygments/pygments"),
    ("getsentry/sentry-python", "rq/rq", "mitmproxy/mitmproxy"),
    ("pyeve/eve-sqlalchemy", "jsocol/django-ratelimit", "mher/flower", "alecthomas/voluptuous",
     "pallets-eco/flask-sqlalchemy-lite"),
    ("carltongibson/neapolitan", "adamchainz/django-cors-headers", "adamchainz/time-machine",
     "adamchainz/django-htmx", "wbond/oscrypto"),
    ("ansible/ansible-lint", "collective/icalendar", "anymail/django-anymail", "Rapptz/discord.py", "boxed/mutmut"),
    ("docker/docker-py", "jsonpickle/jsonpickle", "yourlabs/django-autocomplete-light", "errbotio/errbot",
     "lundberg/respx"),
    ("pyinfra-dev/pyinfra", "construct/construct", "django-otp/django-otp", "ronf/asyncssh", "simonw/sqlite-utils"),
    ("locustio/locust", "eliben/pycparser", "twisted/treq", "cole/aiosmtplib", "wireservice/csvkit"),
    ("cookiecutter/cookiecutter", "arrow-py/arrow", "webpy/webpy", "python-kasa/python-kasa", "petl-developers/petl"),
    ("python-poetry/poetry", "scrapinghub/dateparser", "irmen/Pyro4", "home-assistant-libs/pychromecast",
     "ICRAR/ijson"),
    ("spotify/luigi", "textX/textX", "tomerfiliba-org/rpyc", "zigpy/zigpy", "astanin/python-tabulate"),
    ("Bogdanp/dramatiq", "hgrecco/pint", "oauthlib/oauthlib", "postlund/pyatv", "unionai-oss/pandera"),
    ("pre-commit/pre-commit", "lmfit/uncertainties", "python-openxml/python-docx", "rytilahti/python-miio",
     "miguelgrinberg/Flask-Migrate"),
    ("google/python-fire", "pydata/patsy", "pdfminer/pdfminer.six", "basnijholt/adaptive-lighting",
     "apiflask/apiflask"),
    ("dbcli/pgcli", "python-control/python-control", "python-mechanize/mechanize", "fortra/impacket",
     "alisaifee/limits"),
    ("nvbn/thefuck", "dfm/emcee", "ponyorm/pony", "Gallopsled/pwntools", "vimalloc/flask-jwt-extended"),
    ("jarun/buku", "joblib/joblib", "tortoise/tortoise-orm", "mandiant/capa", "marshmallow-code/flask-smorest"),
    ("gitpython-developers/GitPython", "holoviz/param", "piccolo-orm/piccolo", "volatilityfoundation/volatility3",
     "mkdocstrings/griffe"),
    ("ranger/ranger", "mwaskom/seaborn", "MongoEngine/mongoengine", "maurosoria/dirsearch",
     "executablebooks/MyST-Parser"),
    ("magic-wormhole/magic-wormhole", "pennersr/django-allauth", "PyMySQL/PyMySQL", "Yelp/detect-secrets",
     "sphinx-gallery/sphinx-gallery"),
    ("prompt-toolkit/python-prompt-toolkit", "jschneier/django-storages", "redis/redis-py", "behave/behave",
     "numpy/numpydoc"),
    ("pylint-dev/astroid", "etianen/django-reversion", "pynamodb/PynamoDB", "schemathesis/schemathesis",
     "lektor/lektor"),
    ("andialbrecht/sqlparse", "django-money/django-money", "sanic-org/sanic", "tarpas/pytest-testmon",
     "searxng/searxng"),
    ("kurtmckee/feedparser", "django-treebeard/django-treebeard", "aiogram/aiogram", "taverntesting/tavern",
     "python-gitlab/python-gitlab"),
    ("lmfit/lmfit-py", "SmileyChris/django-countries", "sivel/speedtest-cli", "secdev/scapy", "py-pdf/pypdf"),
    ("cloudpipe/cloudpickle", "django-parler/django-parler", "martinblech/xmltodict", "laramies/theHarvester",
     "sqlobject/sqlobject"),
    ("pyjanitor-devs/pyjanitor", "matthewwithanm/django-imagekit", "kbandla/dpkt", "elastic/elasticsearch-dsl-py",
     "PyFilesystem/pyfilesystem2"),
    ("scikit-learn-contrib/imbalanced-learn", "typeddjango/django-stubs", "JoshData/python-email-validator",
     "neo4j/neo4j-python-driver", "Kotti/Kotti"),
    ("s3tools/s3cmd", "miguelgrinberg/Flask-HTTPAuth", "h2non/jsonpath-ng", "kiwicom/pytest-recording",
     "simonw/datasette"),
    ("aws/chalice", "dbcli/mycli", "pytoolz/toolz", "Teemu/pytest-sugar", "wireservice/agate"),
    ("pdm-project/pdm", "dbcli/litecli", "sciunto-org/python-bibtexparser", "mkdocstrings/mkdocstrings",
     "pudo/dataset"),
    ("pypa/hatch", "Yelp/mrjob", "python-telegram-bot/python-telegram-bot", "tox-dev/sphinx-autodoc-typehints",
     "lk-geimfari/mimesis"),
    ("faust-streaming/faust", "sqlfluff/sqlfluff", "aiortc/aiortc", "twisted/klein", "ArchiveBox/ArchiveBox"),
    ("containers/podman-compose", "powerline/powerline", "hikari-py/hikari", "requests/requests-oauthlib",
     "dgtlmoon/changedetection.io"),
    ("pylint-dev/pylint", "bpython/bpython", "zigpy/zha-device-handlers", "requests/toolbelt", "taigaio/taiga-back"),
    ("rq/django-rq", "xonsh/xonsh", "AlexxIT/SonoffLAN", "scanny/python-pptx", "PyGithub/PyGithub"),
    ("wagtail/django-modelcluster", "benoitc/restkit", "kvesteri/sqlalchemy-continuum",
     "scrapinghub/extruct", "coleifer/micawber"),
    ("internetarchive/openlibrary", "strawberry-graphql/strawberry", "mitogen-hq/mitogen",
     "sissbruecker/linkding", "fastapi-users/fastapi-users"),
    ("spesmilo/electrum", "open-telemetry/opentelemetry-python-contrib", "open-telemetry/opentelemetry-python",
     "pypa/flit", "pydoit/doit"),
    ("django-oscar/django-oscar", "huggingface/huggingface_hub", "graphql-python/graphene-django",
     "irmen/Pyro5", "fastapi/fastapi"),
    ("django-q2/django-q2", "ansible/molecule", "lyft/cartography",
     "fsspec/filesystem_spec", "jamielennox/requests-mock"),
    ("dottxt-ai/outlines", "progval/Limnoria", "ktbyers/netmiko", "jmcnamara/XlsxWriter", "ethereum/web3.py"),
    ("commitizen-tools/commitizen", "pypa/auditwheel", "Instagram/LibCST",
     "django-cms/django-filer", "psycopg/psycopg"),
    ("pydantic/pydantic", "google/mobly", "fsspec/s3fs", "opensearch-project/opensearch-py", "hvac/hvac"),
    ("apache/libcloud", "Kinto/kinto", "MISP/PyMISP", "jsvine/pdfplumber", "python/pyperformance"),
    ("IdentityPython/pysaml2", "simonw/shot-scraper", "pypa/pip-audit",
     "HypothesisWorks/hypothesis", "platformio/platformio-core"),
    ("miguelgrinberg/python-engineio", "ewels/rich-click", "sabnzbd/sabnzbd",
     "robotframework/robotframework", "aws-cloudformation/cfn-lint"),
    ("microsoft/playwright-python", "healthchecks/healthchecks", "alisaifee/flask-limiter",
     "Kozea/CairoSVG", "tahoe-lafs/tahoe-lafs"),
    ("dpkp/kafka-python", "circus-tent/circus", "mopidy/mopidy", "praw-dev/praw", "SCons/scons"),
    ("getredash/redash", "microsoft/debugpy", "huggingface/accelerate", "hbldh/bleak", "mandiant/flare-floss"),
    ("mesonbuild/meson", "twisted/twisted", "kivy/python-for-android", "pycontribs/jira", "moinwiki/moin"),
    ("datastax/python-driver", "mitre/caldera", "pydata/xarray", "nteract/papermill", "latchset/jwcrypto"),
    ("Flexget/Flexget", "zopefoundation/AccessControl", "esphome/esphome",
     "collerek/ormar", "justquick/django-activity-stream"),
    ("vitalik/django-ninja", "ocrmypdf/OCRmyPDF", "rasterio/rasterio", "simonw/llm", "kedro-org/kedro"),
    ("djblets/djblets", "pyinstaller/pyinstaller", "kivy/buildozer", "huggingface/peft", "onionshare/onionshare"),
    ("fail2ban/fail2ban", "nicolargo/glances", "Netflix/dispatch", "janeczku/calibre-web", "indico/indico"),
    ("readthedocs/readthedocs.org", "Legrandin/pycryptodome", "sqlalchemy/sqlalchemy", "plotly/dash",
     "jupyter/nbconvert"),
    ("jupyter/nbclient", "sqlmapproject/sqlmap", "arviz-devs/arviz", "MagicStack/immutables", "pwndbg/pwndbg"),
    ("omry/omegaconf", "skorch-dev/skorch", "PrefectHQ/prefect", "dask/distributed", "deluge-torrent/deluge"),
    ("Pyomo/pyomo", "certbot/certbot", "httpie/http-prompt", "mailpile/Mailpile",
     "wemake-services/wemake-python-styleguide"),
    ("aws/aws-cli", "plone/Products.CMFPlone", "element-hq/synapse", "holoviz/panel", "mkdocs/mkdocs"),
    ("mpmath/mpmath", "zopefoundation/zope.testrunner", "fastapi/full-stack-fastapi-template",
     "awslabs/aws-data-wrangler", "konradhalas/dacite"),
    ("mozilla/pontoon", "explosion/thinc", "yt-dlp/yt-dlp", "pythonprofilers/memory_profiler", "ipython/traitlets"),
    ("miguelgrinberg/Flask-SocketIO", "astropy/astroquery", "lidatong/dataclasses-json", "googleapis/python-storage",
     "kennethreitz/responder"),
    ("voila-dashboards/voila", "zopefoundation/Zope", "mikf/gallery-dl", "napalm-automation/napalm", "pyauth/pyotp"),
    ("nicolaslm/spinach", "dry-python/returns", "instaloader/instaloader", "tobymao/sqlglot", "altair-viz/altair"),
    ("RaRe-Technologies/gensim", "conda/conda", "Zulko/moviepy", "tweepy/tweepy", "home-assistant/supervisor"),
    ("jiaaro/pydub", "jupyter/jupyter_core", "python-greenlet/greenlet", "Kludex/uvicorn-worker",
     "collective/collective.easyform"),
    ("h5py/h5py", "cookiecutter/cookiecutter-django", "mozilla/treeherder", "python-jsonschema/hypothesis-jsonschema",
     "xlwings/xlwings"),
    ("Tribler/tribler", "ipython/ipykernel", "openstack/swift", "benbusby/whoogle-search", "shapely/shapely"),
    ("zulip/zulip", "netbox-community/netbox", "miguelgrinberg/microblog", "python/pythondotorg",
     "googleapis/python-bigquery"),
    ("dask/dask", "camelot-dev/camelot", "nltk/nltk", "stephenmcd/mezzanine", "atlassian-api/atlassian-python-api"),
    ("pypi/warehouse", "joerick/pyinstrument", "nautobot/nautobot", "samuelcolvin/dirty-equals",
     "python/importlib_metadata"),
    ("librosa/librosa", "jupyter/notebook", "pallets-eco/flask-classful", "Toblerity/Fiona", "py-pdf/fpdf2"),
    ("hyperopt/hyperopt", "saleor/saleor", "slackapi/python-slack-sdk", "pytorch/ignite",
     "grantjenks/python-sortedcontainers"),
    ("jupyterhub/jupyterhub", "python/importlib_resources", "msgpack/msgpack-python", "wagtail/wagtail",
     "spyder-ide/spyder"),
    ("spotDL/spotify-downloader", "zarr-developers/zarr-python", "python-visualization/folium", "buildbot/buildbot",
     "dgilland/pydash"),
    ("duo-labs/py_webauthn", "conda/conda-build", "gpodder/gpodder", "aws/aws-sam-cli"),
    ("zulip/python-zulip-api", "ansible/ansible-runner", "openstack/oslo.config", "jupyter-server/jupyter_server",
     "pyproj4/pyproj"),
    ("mozilla/kitsune", "python-rope/rope", "giampaolo/pyftpdlib", "streamlink/streamlink", "mpdavis/python-jose"),
    ("gboeing/osmnx", "beeware/briefcase", "pimutils/vdirsyncer", "commixproject/commix", "fonttools/fonttools"),
    ("pdoc3/pdoc", "encode/requests-async", "ipython/ipython", "mher/tornado-celery", "Kozea/pygal"),
    ("graphql-python/graphql-server", "pvlib/pvlib-python", "CTFd/CTFd", "quodlibet/quodlibet",
     "TandoorRecipes/recipes"),
    ("kiwitcms/Kiwi", "pika/pika", "beeware/toga", "intake/intake", "pyload/pyload"),
    ("Tautulli/Tautulli", "LonamiWebs/Telethon", "qutebrowser/qutebrowser", "Yelp/paasta",
     "tfranzel/drf-spectacular"),
    ("elastic/elasticsearch-py", "Yelp/bravado", "cobbler/cobbler", "pyqtgraph/pyqtgraph", "getnikola/nikola"),
    ("nextcord/nextcord", "dbader/schedule", "scrapy/scrapyd", "ckan/ckan", "peeringdb/peeringdb"),
    ("axnsan12/drf-yasg", "psycopg/psycopg2", "googleapis/google-auth-library-python", "translate/translate",
     "scrapy/protego"),
    ("django/djangoproject.com", "jupyter/qtconsole", "pyglet/pyglet", "Pycord-Development/pycord",
     "wemake-services/django-split-settings"),
    ("strawberry-graphql/strawberry-django", "cannatag/ldap3", "pyro-ppl/pyro", "dropbox/stone", "pyexcel/pyexcel"),
    ("hugapi/hug", "jupyter/jupyter_client", "bokeh/bokeh", "ansible/awx", "eternnoir/pyTelegramBotAPI"),
    ("flask-admin/flask-admin", "jertel/elastalert2", "pypa/pipenv", "vispy/vispy", "PowerDNS-Admin/PowerDNS-Admin"),
    ("pydata/pydata-sphinx-theme", "regebro/pyroma", "holoviz/hvplot", "jupyterlab/jupyterlab-git",
     "pymodbus-dev/pymodbus"),
    ("MobSF/Mobile-Security-Framework-MobSF", "openai/openai-python", "fsspec/adlfs", "Kozea/Pyphen",
     "mealie-recipes/mealie"),
    ("archivy/archivy", "xhtml2pdf/xhtml2pdf", "pimutils/khal", "dask/dask-ml", "Cornices/cornice"),
    ("wger-project/wger", "getpelican/pelican", "UKPLab/sentence-transformers", "rthalley/dnspython",
     "closeio/tasktiger"),
    ("holoviz/datashader", "sherlock-project/sherlock", "python-pillow/Pillow",
     "confluentinc/confluent-kafka-python", "pulp/pulpcore"),
    ("getmoto/moto",),
    ("docker/compose", "google/gin-config", "zalando/spilo", "aws-powertools/powertools-lambda-python",
     "spec-first/connexion"),
    ("getsentry/snuba", "nedbat/scriv", "jupyterhub/oauthenticator", "Azure/azure-functions-python-worker",
     "trailofbits/polyfile"),
    ("jupyterhub/repo2docker", "huggingface/smolagents", "conda-forge/conda-smithy", "jupyterhub/binderhub",
     "freedomofpress/dangerzone"),
    ("simonw/s3-credentials", "huggingface/evaluate", "ipython/ipyparallel", "openai/tiktoken",
     "sigstore/sigstore-python"),
    ("jupyterhub/the-littlest-jupyterhub", "openai/whisper", "facebookresearch/hydra", "microsoft/promptflow",
     "encode/apistar"),
    ("openstack/keystone", "openstack/glance", "langchain-ai/langgraph", "jupyterhub/kubespawner",
     "simonw/django-sql-dashboard"),
    ("dbt-labs/dbt-core", "trailofbits/graphtage", "GoogleCloudPlatform/functions-framework-python",
     "jupyter/nbdime", "python/mypy"),
    ("Instagram/MonkeyType", "mozilla/mozdownload", "SAML-Toolkits/python3-saml", "privacyidea/privacyidea",
     "pex-tool/pex"),
    ("google/yapf", "python/bedevere", "getsentry/arroyo", "GitGuardian/ggshield", "nedbat/cog"),
    ("Instagram/Fixit", "jupyter/nbgrader", "Netflix/metaflow", "spotify/basic-pitch", "aws/sagemaker-python-sdk"),
    ("openstack/horizon", "huggingface/trl", "freedomofpress/securedrop", "python/blurb", "zalando/patroni"),
    ("Farama-Foundation/Gymnasium", "mozilla-services/socorro", "trailofbits/fickling", "python/cherry-picker"),
    ("beeware/rubicon-objc", "miguelgrinberg/Flask-Moment", "mwouts/jupytext", "python-excel/xlrd", "jrnl-org/jrnl"),
    ("zeromq/pyzmq", "optuna/optuna", "anthropics/anthropic-sdk-python", "jupyter-widgets/ipywidgets",
     "pydicom/pydicom"),
    ("geopandas/geopandas", "jupyter/nbformat", "ibis-project/ibis", "fsspec/gcsfs",
     "metabrainz/listenbrainz-server"),
    ("Lightning-AI/torchmetrics", "scrapy-plugins/scrapy-splash", "tartiflette/tartiflette"),
    ("django-wiki/django-wiki", "paperless-ngx/paperless-ngx", "OctoPrint/OctoPrint", "mirumee/ariadne",
     "openwisp/openwisp-controller"),
    ("15r10nk/inline-snapshot", "adamchainz/apig-wsgi", "adamchainz/blacken-docs", "adamchainz/django-auto-prefetch",
     "adamchainz/django-browser-reload"),
    ("adamchainz/django-linear-migrations", "adamchainz/django-minify-html", "adamchainz/django-mysql",
     "adamchainz/django-perf-rec", "adamchainz/django-read-only"),
    ("adamchainz/django-upgrade", "adamchainz/django-version-checks", "adamchainz/django-watchfiles",
     "adamchainz/ec2-metadata", "adamchainz/flake8-comprehensions"),
    ("adamchainz/flake8-tidy-imports", "adamchainz/patchy", "adamchainz/pytest-flake8-path", "alexmojaki/birdseye",
     "alexmojaki/executing"),
    ("alexmojaki/futurecoder", "alexmojaki/heartrate", "alexmojaki/pure_eval", "alexmojaki/snoop",
     "alexmojaki/stack_data"),
    ("bbangert/beaker", "bbangert/routes", "dogsheep/github-to-sqlite", "dogsheep/google-takeout-to-sqlite"),
    ("dogsheep/healthkit-to-sqlite", "dogsheep/twitter-to-sqlite", "dropbox/pyannotate", "facebookincubator/Bowler"),
    ("google/clusterfuzz", "google/grr", "google/pytype", "google/timesketch", "google/turbinia"),
    ("jordaneremieff/mangum", "jpadilla/django-rest-framework-jwt", "Kozea/wdb", "lincolnloop/django-layout",
     "log2timeline/dfvfs"),
    ("log2timeline/plaso", "mailman/mailman", "miguelgrinberg/alchemical", "miguelgrinberg/APIFairy",
     "miguelgrinberg/climax"),
    ("miguelgrinberg/flask-sock", "miguelgrinberg/flasky", "miguelgrinberg/greenletio", "miguelgrinberg/microdot",
     "miguelgrinberg/simple-websocket"),
    ("mozilla-services/autopush", "mozilla-services/syncserver", "mozilla-services/tokenserver", "mozilla/kuma"),
    ("mozilla/mozillians", "mozilla/normandy", "Netflix/bless", "Netflix/lemur", "Netflix/repokid"),
    ("Netflix/security_monkey", "pgjones/quart-auth", "pgjones/quart-cors", "pgjones/quart-db",
     "pgjones/quart-rate-limiter"),
    ("pgjones/quart-schema", "plone/plone.api", "plone/plone.restapi", "pydantic/bump-pydantic", "pydantic/logfire"),
    ("pydantic/pydantic-ai", "pydantic/pydantic-extra-types", "pydantic/pytest-examples",
     "pypa/gh-action-pypi-publish", "pyupio/dparse"),
    ("rochacbruno/dynaconf", "samuelcolvin/aioaws", "samuelcolvin/foxglove", "samuelcolvin/python-devtools",
     "samuelcolvin/watchfiles"),
    ("simonw/asgi-csrf", "simonw/csvs-to-sqlite", "simonw/datasette-app-support", "simonw/datasette-auth-passwords",
     "simonw/datasette-enrichments"),
    ("simonw/datasette-export-notebook", "simonw/datasette-graphql", "simonw/datasette-upload-csvs",
     "simonw/datasette-write"),
    ("simonw/files-to-prompt", "simonw/git-history", "simonw/strip-tags", "simonw/symbex", "simonw/ttok"),
    ("spotify/annoy", "spotify/chartify", "Textualize/trogon", "tiangolo/asyncer"),
    ("tiangolo/typer-cli", "TkTech/humanmark", "wimglenn/advent-of-code-data", "wimglenn/johnnydep"),
    ("Yelp/bravado-core", "Yelp/elastalert", "Yelp/pyramid_swagger", "Yelp/swagger_spec_validator", "Yelp/Tron"),
    ("Yelp/undebt", "zopefoundation/DateTime", "zopefoundation/RestrictedPython"),
    ("allenai/allennlp", "apache/airflow-client-python", "astropy/photutils", "bokeh/jupyter_bokeh"),
    ("chroma-core/chroma", "dask/dask-jobqueue", "dask/fastparquet", "deepmind/dm-haiku", "deepset-ai/haystack"),
    ("DLR-RM/stable-baselines3", "executablebooks/jupyter-book", "executablebooks/mdit-py-plugins",
     "executablebooks/sphinx-book-theme", "explosion/prodigy-recipes"),
    ("explosion/spaCy", "facelessuser/bracex", "facelessuser/pymdown-extensions", "facelessuser/soupsieve",
     "facelessuser/wcmatch"),
    ("Farama-Foundation/PettingZoo", "fsspec/kerchunk", "getpelican/pelican-plugins", "google/jax",
     "guidance-ai/guidance"),
    ("h5netcdf/h5netcdf", "holoviz/colorcet", "holoviz/holoviews", "holoviz/lumen", "huggingface/datasets"),
    ("huggingface/diffusers", "huggingface/tokenizers", "instructor-ai/instructor", "intake/intake-xarray"),
    ("jupyter-server/jupyter-resource-usage", "jupyter/jupyter_console", "keras-team/keras-tuner"),
    ("lektor/lektor-website", "lmcinnes/pynndescent", "lmcinnes/umap", "man-group/arctic", "man-group/dtale"),
    ("man-group/pytest-plugins", "matplotlib/mplfinance", "microsoft/autogen", "mkdocs/mkdocs-redirects",
     "numba/llvmlite"),
    ("openai/gym", "pandas-dev/pandas-stubs", "pangeo-data/climpred", "pelican-plugins/search", "plotly/dash-bio"),
    ("plotly/plotly.py", "pvlib/pvanalytics", "pydata/bottleneck", "pydata/numexpr"),
    ("pyro-ppl/numpyro", "PyTables/PyTables"),
    ("qdrant/qdrant-client", "rasbt/mlxtend", "readthedocs/sphinx_rtd_theme"),
    ("scikit-image/scikit-image", "scikit-learn-contrib/hdbscan", "spacetelescope/jwst", "sphinx-doc/sphinx-autobuild"),
    ("stanfordnlp/dspy", "statsmodels/statsmodels", "sunpy/sunpy", "tensorflow/addons", "Unidata/netcdf4-python"),
    ("voila-dashboards/voila-gridstack", "weaviate/weaviate-python-client", "zarr-developers/numcodecs"),
    ("zauberzeug/nicegui", "reflex-dev/reflex", "litestar-org/litestar", "emmett-framework/emmett",
     "wemake-services/django-test-migrations"),
    ("ansible/ansible-builder", "ansible/ansible-navigator", "ansible/pylibssh", "beeware/batavia",
     "brython-dev/brython"),
    ("coleifer/scout", "coleifer/sqlite-web", "darrenburns/elia", "darrenburns/posting", "fabric/patchwork"),
    ("gleitz/howdoi", "httpie/httpie", "indygreg/PyOxidizer", "jarun/ddgr", "jarun/googler"),
    ("jmcarp/robobrowser", "kivy/kivy", "kivy/plyer", "long2ice/asyncmy", "long2ice/fastapi-cache"),
    ("MagicStack/httptools", "MagicStack/uvloop", "MechanicalSoup/MechanicalSoup", "Nuitka/Nuitka", "ofek/hatch-vcs"),
    ("ofek/pypinfo", "panda3d/panda3d", "pdm-project/pdm-backend", "psf/requests-html", "pygame/pygame"),
    ("pyinvoke/invocations", "pyodide/pyodide", "python-poetry/poetry-plugin-export", "scrapinghub/slackbot",
     "scrapinghub/splash"),
    ("scrapy/scrapyd-client", "sdispater/orator", "sphinx-contrib/spelling", "sqlalchemy/sqlalchemy2-stubs",
     "Textualize/frogmouth"),
    ("Textualize/rich-cli", "Textualize/textual-serve", "Textualize/textual-web", "Textualize/toolong",
     "tldr-pages/tldr-python-client"),
    ("tortoise/aerich", "tox-dev/sphinx-argparse-cli", "tox-dev/tox-ini-fmt"),
    ("asottile/cheetah_lint", "asottile/future-breakpoint", "asottile/setup-py-upgrade", "asottile/ukkonen",
     "audreyfeldroy/cookiecutter-pypackage"),
    ("beetbox/audioread", "beetbox/confuse", "beetbox/mediafile", "bloomberg/memray", "bloomberg/pystack"),
    ("bloomberg/pytest-memray", "cookiecutter/whichcraft", "django-cms/django-cms", "errbotio/err-backend-slackv3",
     "evansd/whitenoise"),
    ("fastapi/fastapi-cli", "feincms/feincms", "gaogaotiantian/viztracer",
     "hackersandslackers/flask-blueprint-tutorial", "hangoutsbot/hangoutsbot"),
    ("iMerica/dj-rest-auth", "matthiask/django-tree-queries", "matthiask/feincms3", "mozilla/django-csp",
     "mozilla/sugardough"),
    ("mps-youtube/mps-youtube", "nschloe/tuna", "plasma-umass/scalene", "pydanny/cached-property", "pyrogram/pyrogram"),
    ("python-social-auth/social-app-django", "python-telegram-bot/ptbcontrib", "pytube/pytube",
     "rkern/line_profiler", "slackapi/bolt-python"),
    ("slackapi/python-slack-events-api", "sopel-irc/sopel", "Tivix/django-rest-auth", "torchbox/wagtail-grapple",
     "wagtail/bakerydemo"),
    ("what-studio/profiling", "Zulko/gizeh"),
    ("certbot/josepy", "python-lsp/python-lsp-ruff", "jorisschellekens/borb",
     "nsidnev/fastapi-realworld-example-app", "wemake-services/wemake-django-template"),
    ("django-crispy-forms/crispy-bootstrap5", "erezsh/plyplus", "ets-labs/python-dependency-injector"),
    ("fabiocaccamo/django-admin-interface", "fabiocaccamo/django-colorfield", "fabiocaccamo/django-treenode",
     "fabiocaccamo/python-benedict", "fabiocaccamo/python-fsutil"),
    ("farridav/django-jazzmin", "hukkin/mdformat", "jcrist/msgspec"),
    ("kvesteri/intervals", "kvesteri/sqlalchemy-i18n", "kvesteri/wtforms-alchemy", "mkdocstrings/python"),
    ("pallets-eco/wtforms-sqlalchemy", "pelican-plugins/sitemap", "peterbrittain/asciimatics",
     "proofit404/dependencies"),
    ("PyCQA/flake8-docstrings", "python-injector/injector", "regebro/tzlocal", "rsalmei/alive-progress", "stub42/pytz"),
    ("Suor/whatever", "tiangolo/poetry-version-plugin", "unfoldadmin/django-unfold", "urwid/urwid", "verigak/progress"),
    ("wagtail/wagtail-localize", "wagtail/telepath", "wagtail/Willow", "wagtail/django-permissionedforms",
     "torchbox/django-pattern-library"),
    ("fiduswriter/fiduswriter", "litestar-org/polyfactory", "pyodide/micropip", "mlflow/mlflow-export-import",
     "scikit-hep/awkward"),
    ("ploomber/ploomber", "kedro-org/kedro-plugins", "optuna/optuna-dashboard", "litestar-org/advanced-alchemy",
     "deepchecks/deepchecks"),
)  # fmt: skip
FIRST_HELD_OUT = SPENT_HELD_OUT[0]
PER_REPO = 40
MAX_COMMIT_LINES = 1500  # a larger Python change is a reformat or a vendored drop, not a review
LOG_DEPTH = 400  # first-parent commits looked at per repository to find PER_REPO code commits
REVIEW_DEADLINE_S = 120.0  # one commit's reviewers stop here; what they skip is named as not reviewed
GIT_TIMEOUT_S = 120.0
TARGET_RIGHT = 0.70
TARGET_PER_1000 = 1.0
TARGET_LISTED_WORTH = 0.50  # issue 39: listed items right or debatable in at least half of the judged ones
JUDGEMENTS = Path(__file__).with_name("history_judgements.json")

Verdict = Literal["right", "debatable", "wrong"]


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    lines: int  # added + deleted lines in .py files


@dataclass
class Posted:
    repo: str
    commit: str
    rule: str
    severity: str
    path: str
    line: int
    title: str
    evidence: str


@dataclass
class CommitResult:
    repo: str
    commit: str
    subject: str
    lines: int
    seconds: float
    posted: list[Posted] = field(default_factory=list)
    error: str = ""
    listed: int = 0  # findings the verifier sent to a person (NEEDS_HUMAN_REVIEW): in the summary, not posted
    folded: int = 0  # those of them counted in one line, not listed (`track_record.usually_wrong`)
    held: list[Posted] = field(default_factory=list)  # those of them a rule's held-out record held back
    # those of them the posting tier listed (`agent.verdicts.posting`): posted under posting="all"
    tier_held: list[Posted] = field(default_factory=list)
    # every finding listed one by one for a person (NEEDS_HUMAN_REVIEW, not folded): what a person is
    # asked to read, judged like the posted ones (issue 39: listed items must be worth a look)
    shown: list[Posted] = field(default_factory=list)


@dataclass
class Judgement:
    verdict: Verdict
    why: str
    # the commit of reviewloop from which the finding is no longer made (its shape was fixed at its
    # cause, checked by reviewing its commit again: `--mark-gone`); such a judgement no longer
    # describes the rule as it is, so it leaves the track record (it stays in every report)
    gone_at: str = ""


# --- choosing commits (pure) ------------------------------------------------------------------------

LOG_FORMAT = "--format=%x00%H%x09%P%x09%s"


LogEntry = tuple[str, int, str, dict[str, int]]  # sha, parent count, subject, {path: changed lines}


def parse_log(text: str) -> list[LogEntry]:
    """`git log --numstat` output in LOG_FORMAT → (sha, parent count, subject, {path: changed lines})."""
    out: list[LogEntry] = []
    for block in text.split("\x00")[1:]:
        header, _, rest = block.partition("\n")
        sha, parents, subject = (header.split("\t", 2) + ["", ""])[:3]
        out.append((sha, len(parents.split()), subject, parse_numstat(rest)))
    return out


def parse_numstat(text: str) -> dict[str, int]:
    """`--numstat` rows → {path: added + deleted lines}."""
    changed: dict[str, int] = {}
    for row in text.splitlines():
        parts = row.split("\t")
        if len(parts) != 3:
            continue
        added, deleted, path = parts
        if " => " in path:  # a rename, `a => b` or `src/{old => new}/m.py`: count it under its new name
            path = re.sub(r"\{[^{}]* => ([^{}]*)\}", r"\1", path).split(" => ")[-1].replace("//", "/")
        # "-" for a binary file: not code a rule reads
        changed[path] = (int(added) if added.isdigit() else 0) + (int(deleted) if deleted.isdigit() else 0)
    return changed


def select_commits(
    log: Iterable[LogEntry], *, per_repo: int = PER_REPO, max_lines: int = MAX_COMMIT_LINES
) -> tuple[list[Commit], int]:
    """The newest `per_repo` code commits of a first-parent log, and how many too-large ones were passed over.

    A code commit changes at least one `.py` line and has a parent (a root commit has no base to
    review against)."""
    chosen: list[Commit] = []
    skipped = 0
    for sha, parents, subject, changed in log:
        if len(chosen) >= per_repo:
            break
        lines = sum(n for path, n in changed.items() if path.endswith(".py"))
        if parents == 0 or lines == 0:
            continue
        if lines > max_lines:
            skipped += 1
            continue
        chosen.append(Commit(sha, subject, lines))
    return chosen, skipped


def interleave(queues: list[tuple[str, Path, list[Commit]]]) -> list[tuple[str, Path, Commit]]:
    """The i-th commit of every repository before the (i+1)-th of any."""
    longest = max((len(commits) for _, _, commits in queues), default=0)
    return [(repo, mirror, commits[i]) for i in range(longest) for repo, mirror, commits in queues if i < len(commits)]


def mirror_path(root: Path, repo: str) -> Path:
    return root / repo.replace("/", "+") / "repo"


def _git_text(mirror: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "--no-pager", *args], cwd=mirror, capture_output=True, check=True, timeout=GIT_TIMEOUT_S
    )
    return done.stdout.decode("utf-8", errors="replace")


def code_commits(mirror: Path, *, per_repo: int, max_lines: int = MAX_COMMIT_LINES) -> tuple[list[Commit], int]:
    """The newest `per_repo` code commits of the first-parent history (`select_commits`), and how many
    were passed over as too large.

    A snapshot that left its largest objects out (the fetch tool keeps repositories under 500 MB, so
    a logo or a data file goes missing) cannot show the numbers of the whole log: `git log --numstat`
    stops at the first commit that needs a missing blob. Then the log is read without numbers and
    each commit's numbers on their own; a commit whose diff needs a missing object is passed over (it
    could not be reviewed either) and said on stderr, the rest of the history still counts."""
    walk = ("log", "--first-parent", LOG_FORMAT, f"--max-count={LOG_DEPTH}", "HEAD")
    try:
        text = _git_text(mirror, *walk[:2], "--diff-merges=first-parent", "--numstat", *walk[2:])
    except subprocess.CalledProcessError:
        # without `--diff-merges`, which makes git diff every merge (and read its missing blobs) even
        # when no numbers are asked for
        headers = parse_log(_git_text(mirror, *walk))
    else:
        return select_commits(parse_log(text), per_repo=per_repo, max_lines=max_lines)
    unreadable: list[str] = []

    def one_by_one() -> Iterator[LogEntry]:
        for sha, parents, subject, _ in headers:
            try:  # a root commit has no parent to diff against; select_commits passes it over
                numbers = _git_text(mirror, "diff", "--numstat", f"{sha}^1", sha, "--") if parents else ""
            except subprocess.CalledProcessError:
                unreadable.append(sha)
                continue
            yield sha, parents, subject, parse_numstat(numbers)

    chosen = select_commits(one_by_one(), per_repo=per_repo, max_lines=max_lines)  # reads only what it needs
    print(
        f"[history] {mirror}: the snapshot lacks objects; read commit by commit, {len(unreadable)} commits passed over",
        file=sys.stderr,
    )
    return chosen


# --- reviewing ----------------------------------------------------------------------------------------


def held_back_by(reason: str) -> Literal["tier", "record"] | None:
    """Which held a finding back from posting, by its verdict's reason: the posting tier or the rule's
    held-out record. The tier's reason quotes the rule's record when it has one ("right in 0 of 2
    findings judged on open-source history"), so it is told by its own marker first."""
    from agent.verdicts.posting import listed_by_tier
    from agent.verdicts.track_record import HELD_BY_RECORD

    if listed_by_tier(reason):
        return "tier"
    return "record" if HELD_BY_RECORD in reason else None


def _review_outcome(mirror: Path, commit: Commit) -> ReviewOutcome:
    """`reviewloop review MIRROR --base C~1 --head C` without a model or a database: the pipeline's outcome."""
    from agent.context import ReviewRequest
    from agent.pipeline import run_review
    from agent.runtime import Runtime

    request = ReviewRequest(
        source="local", title=commit.subject, repo_path=str(mirror), base=f"{commit.sha}~1", head=commit.sha
    )
    runtime = Runtime(pool=None, llm=None, review_deadline_s=REVIEW_DEADLINE_S)
    return run_review(runtime, request, dsn=None, review_id=0)


def review_commit(repo: str, mirror: Path, commit: Commit) -> CommitResult:
    """One commit reviewed as `reviewloop review MIRROR --base C~1 --head C` does, without a model."""
    from agent.verdicts.track_record import folded
    from reviewers.kernel.errors import ReviewloopError

    started = time.perf_counter()
    result = CommitResult(repo, commit.sha, commit.subject, commit.lines, 0.0)
    try:
        outcome = _review_outcome(mirror, commit)
    except ReviewloopError as exc:
        result.error = str(exc)
    else:
        for v in outcome.verified:
            result.listed += v.verdict == "NEEDS_HUMAN_REVIEW"
            result.folded += v.verdict == "NEEDS_HUMAN_REVIEW" and folded(v.reason)
            f = v.finding
            evidence = f.evidence.strip().splitlines()[0][:160] if f.evidence.strip() else ""
            found = Posted(repo, commit.sha, f.rule, f.severity, f.path, f.line, f.title, evidence)
            if v.verdict == "NEEDS_HUMAN_REVIEW" and not folded(v.reason):
                result.shown.append(found)
            if v.verdict == "REAL":
                result.posted.append(found)
            elif v.verdict == "NEEDS_HUMAN_REVIEW" and held_back_by(v.reason) == "tier":
                result.tier_held.append(found)
            elif v.verdict == "NEEDS_HUMAN_REVIEW" and held_back_by(v.reason) == "record":
                result.held.append(found)
    result.seconds = time.perf_counter() - started
    return result


def run(
    mirrors: Path,
    repos: tuple[str, ...] = REPOSITORIES,
    *,
    per_repo: int = PER_REPO,
    budget_s: float | None = None,
    progress: bool = True,
) -> tuple[list[CommitResult], dict[str, int]]:
    """Every chosen commit of every mirror present, one review at a time; stops starting new reviews
    once `budget_s` has passed (the commits left are not counted)."""
    started = time.monotonic()
    results: list[CommitResult] = []
    skipped: dict[str, int] = {}
    queues: list[tuple[str, Path, list[Commit]]] = []
    for repo in repos:
        mirror = mirror_path(mirrors, repo)
        if not mirror.is_dir():
            print(f"[history] {repo}: no mirror at {mirror}, left out", file=sys.stderr)
            continue
        try:
            commits, skipped[repo] = code_commits(mirror, per_repo=per_repo)
        except subprocess.CalledProcessError as exc:  # a snapshot missing objects: `git log --numstat` fails
            said = (exc.stderr or b"").decode("utf-8", errors="replace").strip().splitlines()
            detail = said[-1:] or [f"git exited {exc.returncode}"]
            print(f"[history] {repo}: its history cannot be read ({detail[0]}), left out", file=sys.stderr)
            continue
        queues.append((repo, mirror, commits))
    # Round robin, newest first in each repository: a run cut short by the budget is still spread
    # over every repository instead of leaving the last ones out.
    for repo, mirror, commit in interleave(queues):
        if budget_s is not None and time.monotonic() - started > budget_s:
            print(f"[history] time budget of {budget_s:.0f} s spent; stopping", file=sys.stderr)
            break
        done = review_commit(repo, mirror, commit)
        results.append(done)
        if progress:
            print(
                f"[history] {repo:22} {commit.sha[:10]} {commit.lines:5} lines {len(done.posted)} posted "
                f"{done.seconds:5.1f} s {done.error}",
                file=sys.stderr,
                flush=True,
            )
    return results, skipped


# --- the report (pure) --------------------------------------------------------------------------------


_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")


def shown_evidence(rule: str, evidence: str) -> str:
    """The evidence as a report may print it: a credential finding's value is masked, so that a
    results file never republishes what the finding was about (and is not itself a finding)."""
    if not (rule.startswith("secrets:") or rule == "python:hardcoded-credential"):
        return evidence
    masked = _URL_PASSWORD.sub(r"\1***@", evidence)
    return masked if masked != evidence else "(value withheld)"


def judgement_key(p: Posted) -> str:
    """Stable across reruns: a finding is the same finding when its commit, rule and place are."""
    return f"{p.repo}@{p.commit[:12]}:{p.path}:{p.line}:{p.rule}"


# How many of a rule's latest held-out judgements make its record. Rules are fixed as their wrong
# shapes are found, so a record of every judgement ever made describes rules that no longer exist
# (F821 before Python 2 code was recognised: 51 % right over all its judgements, 85 % over its last
# 40); the latest few batches describe the rule as it is. Judgements are kept in the order they were
# made (`bench/history_judgements.json` is appended batch by batch).
RECORD_WINDOW = 40


def first_sight_record(judgements: dict[str, Judgement]) -> dict[str, dict[str, int]]:
    """Per rule, the right / debatable / wrong counts of its latest `RECORD_WINDOW` findings judged on
    a held-out set at first sight (`SPENT_HELD_OUT`): what `agent.verdicts.track_record` holds a rule
    to. Judgements of the tuned repositories are left out, since rules were fixed on them again and
    again."""
    held_out = {repo for group in SPENT_HELD_OUT for repo in group}
    latest: dict[str, list[tuple[str, str]]] = {}
    for key, judgement in judgements.items():
        repo_commit = key.split(":", 1)[0]
        if repo_commit.split("@", 1)[0] not in held_out or judgement.gone_at:
            continue
        rule = ":".join(key.rsplit(":", 2)[-2:])
        latest.setdefault(rule, []).append((repo_commit, judgement.verdict))
    record: dict[str, Counter[str]] = {}
    commits: dict[str, set[str]] = {}
    for rule, judged in latest.items():
        for repo_commit, verdict in judged[-RECORD_WINDOW:]:
            record.setdefault(rule, Counter())[verdict] += 1
            commits.setdefault(rule, set()).add(repo_commit)
    return {
        rule: {**{v: counts[v] for v in ("right", "debatable", "wrong")}, "commits": len(commits[rule])}
        for rule, counts in sorted(record.items())
    }


def track_record_json(judgements: dict[str, Judgement]) -> str:
    source = (
        "bench/history_judgements.json, findings judged on SPENT_HELD_OUT sets at first sight "
        "(regenerate: python -m bench.history --track-record)"
    )
    rules = [f"  {json.dumps(rule)}: {json.dumps(counts)}" for rule, counts in first_sight_record(judgements).items()]
    return f'{{\n "source": {json.dumps(source)},\n "rules": {{\n' + ",\n".join(rules) + "\n }\n}\n"


def load_judgements(path: Path = JUDGEMENTS) -> dict[str, Judgement]:
    if not path.exists():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {key: Judgement(value["verdict"], value["why"], value.get("gone_at", "")) for key, value in raw.items()}


def findings_made(repo: str, mirror: Path, commit: Commit) -> set[str]:
    """The judgement keys of every finding the current code makes on `commit`, whatever its verdict: a
    finding the verifier now calls a duplicate (or a person's record now holds back) is still made."""
    outcome = _review_outcome(mirror, commit)
    return {
        judgement_key(Posted(repo, commit.sha, f.rule, f.severity, f.path, f.line, f.title, ""))
        for f in (v.finding for v in outcome.verified)
    }


def mark_gone(run: Path, mirrors: Path, path: Path = JUDGEMENTS) -> list[str]:
    """Review again every commit of `run` (a `--json` file) that has a judged finding, and mark each
    judged finding the current code no longer makes with this checkout's commit (`gone_at`); returns
    the keys marked. The judgements file keeps its one-entry-a-line layout."""
    from bench.report import git_commit

    judgements = json.loads(path.read_text(encoding="utf-8"))
    results, _ = from_json(run.read_text(encoding="utf-8"))
    here = git_commit(Path(__file__).resolve().parent.parent)
    marked = []
    for old in results:
        judged = {judgement_key(p) for p in (*old.posted, *old.shown, *old.held, *old.tier_held)} & judgements.keys()
        if not judged:
            continue
        made = findings_made(old.repo, mirror_path(mirrors, old.repo), Commit(old.commit, old.subject, old.lines))
        for key in sorted(judged - made):
            if not judgements[key].get("gone_at"):
                judgements[key]["gone_at"] = here
                marked.append(key)
    lines = [
        f" {json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
        for key, value in judgements.items()
    ]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
    return marked


def render(
    results: list[CommitResult], judgements: dict[str, Judgement], *, skipped: dict[str, int] | None = None
) -> str:
    """Per-repository table, the rate of posted findings, and every posted finding with its judgement.

    Posted is what the review posts by default (posting="proven", `agent.verdicts.posting`); "all" adds
    the findings the posting tier listed for a person, i.e. what posting="all" would have posted on
    the same commits, so the two are paired on one set."""
    skipped = skipped or {}
    repos = list(dict.fromkeys(r.repo for r in results))  # results hold each repository newest first
    posted = [p for r in results for p in r.posted]
    tier_held = [p for r in results for p in r.tier_held]
    lines = sum(r.lines for r in results)
    parts = [
        "| repository | commits | first … last reviewed | lines changed (.py) | posted | per 1,000 lines "
        '| posted with posting="all" | per 1,000 (all) |',
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for repo in repos:
        mine = [r for r in results if r.repo == repo]
        n_lines = sum(r.lines for r in mine)
        n_posted = sum(len(r.posted) for r in mine)
        n_all = n_posted + sum(len(r.tier_held) for r in mine)
        extra = f" (+{skipped[repo]} over {MAX_COMMIT_LINES} lines skipped)" if skipped.get(repo) else ""
        parts.append(
            f"| {repo} | {len(mine)}{extra} | {mine[-1].commit[:10]} … {mine[0].commit[:10]} | {n_lines:,} | "
            f"{n_posted} | {_rate(n_posted, n_lines)} | {n_all} | {_rate(n_all, n_lines)} |"
        )
    n_all = len(posted) + len(tier_held)
    parts.append(
        f"| **all** | {len(results)} | | {lines:,} | {len(posted)} | **{_rate(len(posted), lines)}** "
        f"(target ≤ {TARGET_PER_1000:g}) | {n_all} | {_rate(n_all, lines)} |"
    )
    listed = sum(r.listed for r in results)
    n_folded = sum(r.folded for r in results)
    verdicts = _verdicts(posted, judgements)
    judged = sum(n for v, n in verdicts.items() if v is not None)
    everything = verdicts + _verdicts(tier_held, judgements)
    parts += [
        "",
        f"Posted findings judged: {judged} of {len(posted)} — right {verdicts['right']}, debatable "
        f"{verdicts['debatable']}, wrong {verdicts['wrong']}, not yet judged {verdicts[None]}. "
        f"Right: **{_share(_right_share(verdicts))}** of posted (target ≥ {TARGET_RIGHT:.0%}"
        f"{_interval_words(repository_interval(results, judgements))}). "
        f'With posting="all" (posted, and listed by the posting tier): {n_all} — right {everything["right"]}, '
        f"debatable {everything['debatable']}, wrong {everything['wrong']}, not yet judged {everything[None]}; "
        f"right **{_share(_right_share(everything))}**. Listed for a person in the summary instead of posted "
        f"(NEEDS_HUMAN_REVIEW): {listed}."
        + (
            f" Of them, {n_folded} counted in one line of the summary (rules usually wrong here), not listed."
            if n_folded
            else ""
        ),
    ]
    shown = [p for r in results for p in r.shown]
    if shown:
        shown_verdicts = _verdicts(shown, judgements)
        shown_judged = sum(n for v, n in shown_verdicts.items() if v is not None)
        worth = (shown_verdicts["right"] + shown_verdicts["debatable"]) / shown_judged if shown_judged else float("nan")
        parts += [
            "",
            f"Listed one by one for a person: {len(shown)} — right {shown_verdicts['right']}, debatable "
            f"{shown_verdicts['debatable']}, wrong {shown_verdicts['wrong']}, not yet judged {shown_verdicts[None]}. "
            f"Right or debatable: **{_share(worth)}** of judged (target ≥ {TARGET_LISTED_WORTH:.0%}).",
        ]
    errors = [r for r in results if r.error]
    if errors:
        parts += ["", "Reviews that failed:", *[f"- {r.repo}@{r.commit[:10]}: {r.error}" for r in errors]]
    parts += ["", "| repository@commit | finding | judgement | why |", "|---|---|---|---|"]
    parts += [_finding_row(p, judgements) for p in posted]
    if not posted:
        parts.append("| — | nothing posted | | |")
    held_by: tuple[tuple[str, list[Posted]], ...] = (
        ('Listed by the posting tier (not yet proven on unseen code; posted only with posting="all")', tier_held),
        (
            "Held back by a rule's held-out record (listed for a person, not posted)",
            [p for r in results for p in r.held],
        ),
    )
    held_by += (("Every item listed one by one for a person (NEEDS_HUMAN_REVIEW, not folded)", shown),)
    for heading, held in held_by:
        if not held:
            continue
        held_verdicts = _verdicts(held, judgements)
        parts += [
            "",
            f"{heading}: {len(held)} — right {held_verdicts['right']}, debatable {held_verdicts['debatable']}, "
            f"wrong {held_verdicts['wrong']}, not yet judged {held_verdicts[None]}.",
            "",
            "| repository@commit | finding | judgement | why |",
            "|---|---|---|---|",
            *[_finding_row(p, judgements) for p in held],
        ]
    return "\n".join(parts)


def _verdicts(found: list[Posted], judgements: dict[str, Judgement]) -> Counter[Verdict | None]:
    return Counter(judgements[judgement_key(p)].verdict if judgement_key(p) in judgements else None for p in found)


def _right_share(verdicts: Counter[Verdict | None]) -> float:
    total = sum(verdicts.values())
    return verdicts["right"] / total if total else float("nan")


BOOTSTRAP_DRAWS = 2000


def repository_interval(
    results: list[CommitResult], judgements: dict[str, Judgement], *, draws: int = BOOTSTRAP_DRAWS, seed: int = 0
) -> tuple[float, float] | None:
    """A 95 % interval for the share of judged posted findings that are right, resampling whole
    repositories (with replacement) rather than findings: one repository often supplies most of a
    set's posts, and its findings share a cause, so an interval that treats posts as independent
    (Wilson's) is too narrow. None when fewer than two repositories posted anything judged."""
    import random

    by_repo: dict[str, list[int]] = {}
    for r in results:
        tally = by_repo.setdefault(r.repo, [0, 0])  # right, judged
        for p in r.posted:
            j = judgements.get(judgement_key(p))
            if j is not None:
                tally[0] += j.verdict == "right"
                tally[1] += 1
    tallies = list(by_repo.values())
    if sum(1 for _, judged in tallies if judged) < 2:
        return None
    rng = random.Random(seed)
    shares = []
    for _ in range(draws):
        drawn = [tallies[rng.randrange(len(tallies))] for _ in tallies]
        judged = sum(t[1] for t in drawn)
        if judged:
            shares.append(sum(t[0] for t in drawn) / judged)
    shares.sort()
    return shares[int(0.025 * (len(shares) - 1))], shares[int(0.975 * (len(shares) - 1))]


def _finding_row(p: Posted, judgements: dict[str, Judgement]) -> str:
    j = judgements.get(judgement_key(p))
    finding = f"`{p.path}:{p.line}` {p.severity} {p.rule}: {p.title}"
    if p.evidence:
        evidence = shown_evidence(p.rule, p.evidence).replace("`", "'")
        finding += f" — `{evidence}`"
    return (
        f"| {p.repo}@{p.commit[:10]} | {finding.replace('|', '¦')} | {j.verdict if j else '—'} | "
        f"{(j.why if j else 'not judged').replace('|', '¦')} |"
    )


def _rate(count: int, lines: int) -> str:
    return f"{1000.0 * count / lines:.2f}" if lines else "n/a"


def _interval_words(interval: tuple[float, float] | None) -> str:
    return "" if interval is None else f"; repository bootstrap 95 %: {interval[0]:.0%}–{interval[1]:.0%}"


def _share(value: float) -> str:
    return "n/a" if value != value else f"{value:.0%}"


def to_json(results: list[CommitResult], skipped: dict[str, int]) -> str:
    return json.dumps({"skipped": skipped, "results": [asdict(r) for r in results]}, indent=1)


def from_json(text: str) -> tuple[list[CommitResult], dict[str, int]]:
    raw = json.loads(text)
    results = []
    for r in raw["results"]:
        posted = [Posted(**p) for p in r.pop("posted")]
        held = [Posted(**p) for p in r.pop("held", [])]
        tier_held = [Posted(**p) for p in r.pop("tier_held", [])]
        shown = [Posted(**p) for p in r.pop("shown", [])]
        results.append(CommitResult(**r, posted=posted, held=held, tier_held=tier_held, shown=shown))
    return results, {k: int(v) for k, v in raw.get("skipped", {}).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Review the last code commits of real repositories, no model.")
    parser.add_argument("--mirrors", type=Path, help="root of the mirrors, laid out as ROOT/OWNER+NAME/repo")
    parser.add_argument("--repos", default=",".join(REPOSITORIES), help="comma-separated OWNER/NAME list")
    parser.add_argument(
        "--held-out", action="store_true", help=f"review the held-out repositories instead: {', '.join(HELD_OUT)}"
    )
    parser.add_argument("--per-repo", type=int, default=PER_REPO, help="code commits reviewed per repository")
    parser.add_argument("--budget-s", type=float, default=None, help="start no review after this many seconds")
    parser.add_argument("--json", type=Path, default=None, help="write the raw results here")
    parser.add_argument("--render", type=Path, default=None, help="render a --json file instead of reviewing")
    parser.add_argument("--judgements", type=Path, default=JUDGEMENTS)
    parser.add_argument(
        "--track-record",
        action="store_true",
        help="write the held-out record of each rule from the judgements to agent/verdicts/track_record.json",
    )
    parser.add_argument(
        "--mark-gone",
        type=Path,
        default=None,
        help="review again the judged commits of this --json file and mark the judged findings the current code "
        "no longer makes (they leave the track record)",
    )
    parser.add_argument(
        "--recheck",
        type=Path,
        default=None,
        help="review again only the commits of this --json file that posted something (after a rule fix that "
        "can only silence findings), keeping the rest as they were",
    )
    args = parser.parse_args(argv)
    if args.mark_gone is not None:
        if args.mirrors is None:
            parser.error("--mark-gone needs --mirrors")
        for key in mark_gone(args.mark_gone, args.mirrors, args.judgements):
            print(f"[history] gone: {key}", file=sys.stderr)
        return 0
    if args.track_record:
        from agent.verdicts.track_record import TRACK_RECORD

        TRACK_RECORD.write_text(track_record_json(load_judgements(args.judgements)), encoding="utf-8")
        print(f"[history] wrote {TRACK_RECORD}", file=sys.stderr)
        return 0
    if args.render is not None:
        results, skipped = from_json(args.render.read_text(encoding="utf-8"))
    elif args.recheck is not None:
        if args.mirrors is None:
            parser.error("--recheck needs --mirrors")
        results, skipped = from_json(args.recheck.read_text(encoding="utf-8"))
        for i, old in enumerate(results):
            if old.posted:
                commit = Commit(old.commit, old.subject, old.lines)
                results[i] = review_commit(old.repo, mirror_path(args.mirrors, old.repo), commit)
                print(f"[history] recheck {old.repo} {old.commit[:10]}: {len(old.posted)} → {len(results[i].posted)}",
                      file=sys.stderr)  # fmt: skip
        if args.json is not None:
            args.json.write_text(to_json(results, skipped), encoding="utf-8")
    else:
        if args.mirrors is None:
            parser.error("--mirrors is needed to review (or --render FILE)")
        started_at, started = datetime.now(UTC), time.perf_counter()
        load = os.getloadavg()
        repos = HELD_OUT if args.held_out else tuple(r.strip() for r in args.repos.split(",") if r.strip())
        results, skipped = run(args.mirrors, repos, per_repo=args.per_repo, budget_s=args.budget_s)
        print(
            f"[history] {len(results)} commits in {time.perf_counter() - started:.0f} s, started "
            f"{started_at:%Y-%m-%d %H:%M} UTC, load before {load[0]:.2f}",
            file=sys.stderr,
        )
        if args.json is not None:
            args.json.write_text(to_json(results, skipped), encoding="utf-8")
    print(render(results, load_judgements(args.judgements), skipped=skipped))
    lines = sum(r.lines for r in results)
    posted = sum(len(r.posted) for r in results)
    return 0 if lines and 1000.0 * posted / lines <= TARGET_PER_1000 else 1


if __name__ == "__main__":
    raise SystemExit(main())
