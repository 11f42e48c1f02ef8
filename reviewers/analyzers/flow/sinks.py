"""Which calls are sinks, and which of their arguments matter.

A sink is named by its qualified call (`subprocess.run`, `flask.redirect`) or, for methods of
objects whose type the interpreter cannot see, by the method name with a shape check on the
argument (`cursor.execute` takes SQL; `tree.xpath` an XPath expression). The special cases with
more logic than "this argument" (a shell list, a parser's options, a response's content type) are
in `engine`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ArgSink:
    cls: str
    positions: tuple[int, ...] = (0,)
    keywords: tuple[str, ...] = ()


def _all(names: str, sink: ArgSink) -> dict[str, ArgSink]:
    return dict.fromkeys(names.split(), sink)


CALL_SINKS: dict[str, ArgSink] = {
    **_all("os.system os.popen subprocess.getoutput subprocess.getstatusoutput commands.getoutput "
           "asyncio.create_subprocess_shell", ArgSink("command", (0,), ("command", "cmd"))),
    **_all("os.execl os.execlp os.execv os.execvp os.execve os.execle os.execlpe os.execvpe",
           ArgSink("command", (0,), ("path", "file"))),
    **_all("eval exec compile builtins.eval builtins.exec", ArgSink("code", (0,), ("source",))),
    **_all("pickle.loads pickle.load pickle.Unpickler _pickle.loads cPickle.loads cPickle.load dill.loads dill.load "
           "marshal.loads marshal.load jsonpickle.decode pandas.read_pickle joblib.load yaml.unsafe_load "
           "yaml.unsafe_load_all shelve.open", ArgSink("deserialization", (0,), ("data", "file", "s", "filename"))),
    **_all("open io.open os.open codecs.open aiofiles.open os.remove os.unlink os.rmdir os.listdir os.scandir "
           "os.makedirs os.mkdir os.stat os.lstat os.access os.chmod os.path.exists os.path.isfile os.path.isdir "
           "os.path.getsize os.path.getmtime os.path.lexists shutil.rmtree tarfile.open zipfile.ZipFile "
           "linecache.getline send_file flask.send_file FileResponse starlette.responses.FileResponse "
           "fastapi.responses.FileResponse django.http.FileResponse pathlib.Path.read_text",
           ArgSink("path", (0,), ("file", "path", "name", "filename", "path_or_file"))),
    **_all("shutil.copy shutil.copyfile shutil.copy2 shutil.move shutil.copytree os.rename os.replace",
           ArgSink("path", (0, 1), ("src", "dst"))),
    **_all("redirect flask.redirect quart.redirect django.shortcuts.redirect", ArgSink("redirect", (0,),
           ("location", "to"))),
    **_all("HttpResponseRedirect HttpResponsePermanentRedirect django.http.HttpResponseRedirect "
           "django.http.HttpResponsePermanentRedirect", ArgSink("redirect", (0,), ("redirect_to",))),
    **_all("RedirectResponse starlette.responses.RedirectResponse fastapi.responses.RedirectResponse",
           ArgSink("redirect", (0,), ("url",))),
    **_all("aiohttp.web.HTTPFound aiohttp.web.HTTPSeeOther aiohttp.web.HTTPMovedPermanently "
           "aiohttp.web.HTTPTemporaryRedirect web.HTTPFound web.HTTPSeeOther",
           ArgSink("redirect", (0,), ("location",))),
    **_all("jinja2.Template Template render_template_string flask.render_template_string mako.template.Template "
           "django.template.Template jinja2.Environment.from_string",
           ArgSink("template", (0,), ("source", "text", "template_string"))),
    **_all(" ".join(f"{lib}.{verb}" for lib in ("requests", "httpx") for verb in
                    ("get", "post", "put", "patch", "delete", "head", "request", "stream")),
           ArgSink("ssrf", (0,), ("url",))),
    **_all("urllib.request.urlopen urlopen urllib.request.Request", ArgSink("ssrf", (0,), ("url",))),
    **_all("aiohttp.request urllib3.request", ArgSink("ssrf", (1,), ("url",))),
    **_all("http.client.HTTPConnection http.client.HTTPSConnection httplib.HTTPConnection httplib.HTTPSConnection",
           ArgSink("ssrf", (0,), ("host",))),
    # JavaScript evaluated from Python: the text runs as code in an engine embedded in the process
    **_all("js2py.eval_js js2py.eval_js6 execjs.eval execjs.exec_ execjs.compile", ArgSink("code", (0,), ("source",))),
    **_all("lxml.etree.XPath lxml.etree.ETXPath", ArgSink("xpath", (0,), ("path",))),
    **_all("make_response flask.make_response django.http.HttpResponse HttpResponse HTMLResponse "
           "starlette.responses.HTMLResponse fastapi.responses.HTMLResponse",
           ArgSink("xss", (0,), ("content", "response"))),
    **_all("flask.Response werkzeug.wrappers.Response werkzeug.Response quart.Response aiohttp.web.Response "
           "web.Response starlette.responses.Response fastapi.responses.Response fastapi.Response",
           ArgSink("xss", (0,), ("response", "text", "body", "content"))),
    # text marked safe HTML is emitted as is wherever it is rendered
    **_all("markupsafe.Markup flask.Markup jinja2.Markup Markup django.utils.safestring.mark_safe "
           "django.utils.html.mark_safe mark_safe", ArgSink("xss", (0,), ("base", "s"))),
    **_all("sqlalchemy.text sqlalchemy.sql.text sqlalchemy.sql.expression.text", ArgSink("sql", (0,), ("text",))),
}  # fmt: skip

# Methods that are sinks whatever the receiver, with a check on the argument's text where the name
# is also common elsewhere (`str.find`, `re.search`).
SQL_METHODS = frozenset({"execute", "executemany", "executescript", "exec_driver_sql", "mogrify", "read_sql",
                         "read_sql_query", "raw", "extra", "text"})  # fmt: skip
SQL_SHAPE_METHODS = frozenset({"raw", "extra", "text", "read_sql", "read_sql_query"})
XPATH_METHODS = frozenset({"xpath"})
ELEMENTPATH_METHODS = frozenset({"find", "findall", "findtext", "iterfind"})
LDAP_METHODS = frozenset({"search_s", "search_st", "search_ext", "search_ext_s", "search"})
PATH_METHODS = frozenset(
    {"read_bytes", "read_text", "write_bytes", "write_text", "unlink", "rmdir", "iterdir", "touch", "exists", "stat",
     "is_file", "is_dir", "mkdir", "symlink_to", "hardlink_to", "lstat"}
)  # fmt: skip
# Path methods whose names other APIs share (SQLAlchemy's `Select.exists()`, a QuerySet's `exists()`, a
# cache's `exists(key)`): sinks only on a receiver that may be a path. pathlib's take no positional
# argument, so a call with one is some other API.
SHARED_PATH_METHODS = frozenset({"exists", "stat", "lstat", "is_file", "is_dir"})
# Query builders (SQLAlchemy Core and ORM, Flask-SQLAlchemy, SQLModel, Django's managers): what they
# build is a statement object whose values are bound as parameters, not SQL text.
ORM_STATEMENT = "<orm statement>"
ORM_STATEMENT_CALLS = frozenset(
    {f"{lib}.{verb}" for lib in ("sqlalchemy", "sqlalchemy.sql", "sqlalchemy.sql.expression", "sqlalchemy.future",
                                 "sqlmodel") for verb in ("select", "insert", "update", "delete")}
    | {"sqlalchemy.dialects.postgresql.insert", "sqlalchemy.dialects.sqlite.insert", "sqlalchemy.dialects.mysql.insert"}
)  # fmt: skip
# The same builders reached through a database handle (`db.select(User)`, `session.query(User)`).
ORM_HANDLE_METHODS = frozenset({"select", "insert", "update", "delete", "query"})
# What a query builder takes as SQL text all the same (Django's `raw` and `extra`): on a statement,
# these arguments are sinks whatever their text looks like.
ORM_SQL_TEXT: dict[str, ArgSink] = {
    "raw": ArgSink("sql", (0,), ("raw_query",)),
    "extra": ArgSink("sql", (0, 1, 3, 4), ("select", "where", "tables", "order_by")),
}
# Class attributes that are a model's query manager (`User.query`, `User.objects`).
ORM_MANAGERS = frozenset({"query", "objects"})
TEMPLATE_METHODS = frozenset({"from_string"})
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "/bin/sh", "/bin/bash", "/usr/bin/bash", "/bin/zsh", "cmd",
                    "cmd.exe", "powershell", "pwsh"})  # fmt: skip
SUBPROCESS_CALLS = frozenset(
    {"subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output", "subprocess.Popen",
     "asyncio.create_subprocess_exec", "os.spawnl", "os.spawnlp", "os.spawnv", "os.spawnvp", "os.posix_spawn",
     "os.posix_spawnp"}
)  # fmt: skip
# XML parsing entry points that take a `parser`: with one that resolves external entities, they are sinks.
XML_PARSE_CALLS = frozenset(
    {"lxml.etree.fromstring", "lxml.etree.parse", "lxml.etree.XML", "lxml.etree.iterparse", "xml.dom.pulldom.parse",
     "xml.dom.pulldom.parseString", "xml.dom.minidom.parse", "xml.dom.minidom.parseString", "xml.sax.parse",
     "xml.sax.parseString", "lxml.objectify.fromstring", "lxml.objectify.parse"}
)  # fmt: skip
XML_PARSER_FACTORIES = frozenset({"lxml.etree.XMLParser", "lxml.etree.XMLPullParser", "lxml.objectify.makeparser"})
SAX_FACTORIES = frozenset({"xml.sax.make_parser"})
UNSAFE_PARSER = "<xml parser resolving external entities>"
SAX_PARSER = "<sax parser>"
CONFIG_PARSERS = frozenset(
    {"configparser.ConfigParser", "configparser.RawConfigParser", "configparser.SafeConfigParser"}
)
