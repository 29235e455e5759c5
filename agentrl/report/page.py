"""The report as one self-contained HTML file: inline CSS, SVG, data (JSON) and script.

Nothing is fetched: no CDN, no fonts, no server. The script (written for this page, a few dozen
lines) only switches the estimator whose advantages the graphs show and lists the transcripts
through a clicked edge or node. The estimator comes from the selector or the URL fragment
(``report.html#method=gigpo&vs=grpo``: colour and label by GiGPO, GRPO's number beside it).
Script errors are written into the page (``<html data-errors=...>``) as well as the console,
so a headless browser's ``--dump-dom`` shows them; ``<html data-ready="1">`` says the script ran
to the end.
"""

from __future__ import annotations

import html
import json
from typing import Any

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;
 color:#222;background:#fff}
header{background:#24292f;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px} header .sub{color:#c9d1d9;font-size:13px}
main{padding:8px 24px 40px;max-width:1500px}
h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
h3{margin:18px 0 6px}
.charts{display:flex;flex-wrap:wrap;gap:8px}
.chart-title{font-size:12px;font-weight:600} .tick{font-size:10px;fill:#555}
.legend{margin:6px 0 10px} .legend-item{margin-right:16px;white-space:nowrap}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;
 vertical-align:-1px}
table.kv{border-collapse:collapse;font-size:13px} .kv td{border:1px solid #e1e1e1;padding:2px 8px}
pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px;max-height:420px}
.controls{position:sticky;top:0;background:#fffffff0;padding:8px 0;z-index:2;
 border-bottom:1px solid #eee}
.graph-box{overflow:auto;border:1px solid #e4e4e4;border-radius:4px;background:#fff}
.edge-label{font-size:10px;fill:#222;text-anchor:middle;paint-order:stroke;stroke:#fff;
 stroke-width:3px;pointer-events:none}
.node-label{font-size:9px;text-anchor:middle;fill:#fff;pointer-events:none}
.edge{cursor:pointer} .node{cursor:pointer}
.edge:hover .edge-line,.edge.sel .edge-line{stroke-opacity:1;filter:drop-shadow(0 0 2px #000)}
.caption{color:#555;font-size:12px;margin:4px 0}
.transcripts{margin:6px 0 14px}
.traj{border-left:3px solid #888;padding:2px 8px;margin:6px 0;background:#fcfcfc}
.traj.won{border-color:#1a9850} .traj.lost{border-color:#d73027}
.turn{margin:3px 0;font-size:12px} .turn pre{margin:2px 0;max-height:160px}
.turn.hit{background:#fff5cc}
.muted{color:#777} .warn{color:#a15c00}
details>summary{cursor:pointer}
"""

ERROR_TRAP = """
(function(){var d=document.documentElement;function add(m){d.setAttribute('data-errors',
(d.getAttribute('data-errors')||'')+m+'\\n');}
window.addEventListener('error',function(e){add('error: '+e.message);});
window.addEventListener('unhandledrejection',function(e){add('rejection: '+e.reason);});})();
"""

SCRIPT = """
(function(){
'use strict';
var DATA = JSON.parse(document.getElementById('report-data').textContent);
var methodSel = document.getElementById('method'), vsSel = document.getElementById('vs');
function fmt(a){ return (a >= 0 ? '+' : '\\u2212') + Math.abs(a).toFixed(2); }
function mix(a, b, t){ return Math.round(a + (b - a) * t); }
// The same ramp as graph_view.adv_colour: red (negative), grey (0), green (positive).
function advColour(a, scale){
  var t = scale > 0 ? Math.max(-1, Math.min(1, a / scale)) : 0, s = Math.abs(t);
  var g = [187, 187, 187], e = t > 0 ? [26, 152, 80] : [215, 48, 39];
  return 'rgb(' + mix(g[0], e[0], s) + ',' + mix(g[1], e[1], s) + ',' + mix(g[2], e[2], s) + ')';
}
function readHash(){
  var out = {};
  location.hash.replace(/^#/, '').split('&').forEach(function(kv){
    var p = kv.split('=');
    if (p[0]) out[decodeURIComponent(p[0])] = decodeURIComponent(p[1] || '');
  });
  return out;
}
function label(e, m){ var a = e.adv[m]; return a === undefined ? 'n/a' : fmt(a); }
function apply(){
  var m = methodSel.value, vs = vsSel.value;
  document.querySelectorAll('svg.traj-graph').forEach(function(svg){
    var g = DATA.graphs[svg.id];
    if (!g) return;
    var scale = 0;
    g.edges.forEach(function(e){
      if (e.adv[m] !== undefined) scale = Math.max(scale, Math.abs(e.adv[m]));
    });
    g.edges.forEach(function(e, i){
      var el = document.getElementById(svg.id + '-e' + i);
      if (!el) return;
      var text = label(e, m) + (vs && vs !== m ? ' | ' + label(e, vs) : '');
      el.querySelector('.edge-label').textContent = text;
      var a = e.adv[m];
      el.querySelector('.edge-line').setAttribute(
        'stroke', a === undefined ? '#bbb' : advColour(a, scale));
    });
  });
  document.querySelectorAll('.method-name').forEach(function(s){
    s.textContent = m + (vs && vs !== m ? ' | ' + vs : '');
  });
}
function setFromHash(){
  var h = readHash();
  if (h.method && DATA.methods.indexOf(h.method) >= 0) methodSel.value = h.method;
  if (h.vs !== undefined && (h.vs === '' || DATA.methods.indexOf(h.vs) >= 0)) vsSel.value = h.vs;
  apply();
}
function onSelect(){
  var h = 'method=' + encodeURIComponent(methodSel.value);
  if (vsSel.value) h += '&vs=' + encodeURIComponent(vsSel.value);
  history.replaceState(null, '', '#' + h);
  apply();
}
function el(tag, cls, text){
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function showTrajs(svgId, stepList, title){
  var g = DATA.graphs[svgId], it = DATA.iterations[g.iteration];
  var box = document.getElementById(svgId + '-tx'), m = methodSel.value, hit = {}, trajs = [];
  stepList.forEach(function(k){
    hit[k] = true;
    if (trajs.indexOf(it.step_traj[k]) < 0) trajs.push(it.step_traj[k]);
  });
  box.textContent = '';
  var more = trajs.length > DATA.max_transcripts;
  box.appendChild(el('div', 'caption', title + ': ' + trajs.length + ' episode(s) pass here' +
    (more ? ' (the first ' + DATA.max_transcripts + ' shown)' : '')));
  trajs.slice(0, DATA.max_transcripts).forEach(function(tr){
    var info = it.trajs[tr], d = el('div', 'traj ' + (info.success ? 'won' : 'lost'));
    d.appendChild(el('div', '', 'episode ' + tr + ' \\u2014 ' +
      (info.success ? 'solved' : 'not solved') + ', return ' + info.ret.toFixed(2) + ', ' +
      info.n + ' turns'));
    for (var k = info.first; k < info.first + info.n; k++){
      var t = el('div', 'turn' + (hit[k] ? ' hit' : ''));
      var a = it.adv[m] ? it.adv[m][k] : undefined;
      var act = it.action[k] === null ? '<invalid>' : it.action[k];
      t.appendChild(el('div', '', 'turn ' + it.step_t[k] + ': action ' + act + ', reward ' +
        it.reward[k].toFixed(2) + ', advantage (' + m + ') ' + (a === undefined ? 'n/a' : fmt(a))));
      t.appendChild(el('pre', '', it.obs[k]));
      t.appendChild(el('div', 'muted', 'response: ' + JSON.stringify(it.resp[k])));
      d.appendChild(t);
    }
    box.appendChild(d);
  });
}
document.querySelectorAll('svg.traj-graph').forEach(function(svg){
  svg.addEventListener('click', function(ev){
    var edge = ev.target.closest('.edge'), node = ev.target.closest('.node');
    var g = DATA.graphs[svg.id];
    svg.querySelectorAll('.sel').forEach(function(x){ x.classList.remove('sel'); });
    if (edge){
      var e = g.edges[+edge.getAttribute('data-edge')];
      edge.classList.add('sel');
      showTrajs(svg.id, e.steps, 'action "' + e.action + '" (' + e.count + ' steps)');
    } else if (node){
      var id = node.getAttribute('data-node'), steps = [];
      g.edges.forEach(function(e){
        if (String(e.src) === id || String(e.dst) === id) steps = steps.concat(e.steps);
      });
      showTrajs(svg.id, steps, 'state ' + id);
    }
  });
});
methodSel.addEventListener('change', onSelect);
vsSel.addEventListener('change', onSelect);
window.addEventListener('hashchange', setFromHash);
setFromHash();
document.documentElement.setAttribute('data-ready', '1');
})();
"""


def esc(text: Any) -> str:
    return html.escape(str(text))


def json_for_script(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>`` breakout)."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(title: str, subtitle: str, body: str, data: dict | None = None) -> str:
    scripts = ""
    if data is not None:
        scripts = (
            f'<script type="application/json" id="report-data">{json_for_script(data)}</script>'
            f"<script>{SCRIPT}</script>"
        )
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<script>{ERROR_TRAP}</script><style>{CSS}</style></head><body>"
        f'<header><h1>{esc(title)}</h1><div class="sub">{esc(subtitle)}</div></header>'
        f"<main>{body}</main>{scripts}</body></html>\n"
    )


def kv_table(items: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in items.items())
    return f'<table class="kv">{rows}</table>'


def selectors(methods: list[str], default: str) -> str:
    opts = "".join(
        f'<option value="{esc(m)}"{" selected" if m == default else ""}>{esc(m)}</option>'
        for m in methods
    )
    vs = '<option value="">(none)</option>' + "".join(
        f'<option value="{esc(m)}">{esc(m)}</option>' for m in methods
    )
    return (
        '<div class="controls">Advantages by estimator <select id="method">'
        f'{opts}</select> beside <select id="vs">{vs}</select> '
        '<span class="muted">(edges: colour and first number = the left estimator; click an '
        "edge or a state for the episodes through it; the URL fragment "
        "<code>#method=NAME&amp;vs=NAME</code> selects too)</span></div>"
    )
