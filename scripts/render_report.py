"""Execute the report notebook (report/perflab.py) and write one self-contained HTML file.

Uses the Python APIs of jupytext, nbclient and nbconvert only (no console
scripts: on some machines they are importable but not on PATH). The kernel
finds its inputs in PERFLAB_RESULTS / PERFLAB_FIGURES, which it inherits from
this process. If any cell raises, no HTML is written and the exit status is
non-zero.

Under Snakemake (``script:``): input.notebook, input.figures, output[0], log[0];
the results directory is output[0]'s directory. Standalone:

    python scripts/render_report.py --results results/TAG --figures figures/TAG --out report.html
"""

import os
import re
import sys
import time
from pathlib import Path

from perflab.core import io

#: a report template without scripts fetched from a CDN: the "lab" page with the
#: require.js, MathJax and mermaid loaders removed (the report needs none of them)
TEMPLATE_NAME = "perflab_selfcontained.html.j2"
TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: seconds one notebook cell may run
CELL_TIMEOUT_S = 600


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def execute(notebook, results, figures, root):
    """Run the notebook with the kernel in ``root``; return the executed notebook."""
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = jupytext.read(notebook)
    # the kernel inherits this environment: its inputs, and the repo on its import path
    os.environ["PERFLAB_RESULTS"] = str(results)
    os.environ["PERFLAB_FIGURES"] = str(figures)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH")) if p
    )
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(root)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        # the cell's traceback, without the terminal colour codes the kernel adds
        raise RuntimeError("report notebook failed:\n" + ANSI.sub("", str(exc))) from None
    return nb


def drop_stderr(nb):
    """Move warnings printed by cells from the report to the log."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                log("notebook stderr: " + "".join(out.get("text", "")).rstrip())
            else:
                kept.append(out)
        cell["outputs"] = kept


def _find_templates() -> None:
    """Let Jupyter find nbconvert's templates wherever pip put its data files.

    A `pip install --target DIR` (how the lent GPU machine gets these packages)
    puts them in DIR/share/jupyter, a place Jupyter does not search by itself.
    """
    import nbconvert

    data = Path(nbconvert.__file__).resolve().parents[1] / "share" / "jupyter"
    if (data / "nbconvert" / "templates").is_dir():
        paths = [str(data), *filter(None, os.environ.get("JUPYTER_PATH", "").split(os.pathsep))]
        os.environ["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(paths))


def to_html(nb, title):
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    _find_templates()
    exporter = HTMLExporter(
        template_name="lab",
        extra_loaders=[DictLoader({TEMPLATE_NAME: TEMPLATE})],
        template_file=TEMPLATE_NAME,
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return body


def main(notebook, results, figures, out, root):
    root = Path(root).resolve()
    # absolute paths: the kernel runs in `root`, whatever this process's cwd
    notebook, results, figures, out = (Path(p).resolve() for p in (notebook, results, figures, out))
    t0 = time.perf_counter()
    log(f"report: results {results}, figures {figures}")
    nb = execute(notebook, results, figures, root)
    log(f"report: notebook executed in {time.perf_counter() - t0:.1f} s")
    drop_stderr(nb)
    html = to_html(nb, f"perflab report · {results.name}")
    io.atomic_write_text(out, html)
    log(f"report: {len(html) / 1e3:.0f} kB -> {out} ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is not None:
        out = Path(smk.output[0])
        # no figures selected: the figure directory of the same tag
        fig_dir = (Path(smk.input.figures[0]).parent if len(smk.input.figures)
                   else Path(smk.config.get("figures_dir", "figures")) / out.parent.name)
        # the script runs from a copy under .snakemake/; the repo is its original dir's parent
        repo = Path(smk.scriptdir).parent
        with io.log_to(smk.log[0]):
            main(smk.input.notebook, out.parent, fig_dir, out, repo)
    else:
        import argparse

        here = Path(__file__).resolve().parent.parent
        p = argparse.ArgumentParser(description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--results", required=True, help="result directory of one run")
        p.add_argument("--figures", required=True, help="figure directory of the same run")
        p.add_argument("--out", required=True, help="HTML file to write")
        p.add_argument("--notebook", default=str(here / "report" / "perflab.py"))
        a = p.parse_args()
        main(a.notebook, a.results, a.figures, a.out, here)
