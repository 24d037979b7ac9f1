"""The lab's static report: `render_site(paths, out)` turns run directories into HTML pages.

Grouping and formatting are Python (report.sections.section, report.draw.tables, report.draw.charts); the jinja2
templates in report/templates only lay the result out. See docs/report.md.
"""

from report.site.build import Site, render_site

__all__ = ["Site", "render_site"]
