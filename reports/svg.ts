/**
 * Hand-written SVG charts for the HTML report (no chart library, no network): a log-scale per-stage line
 * chart and a log-binned error histogram. Every point and bar carries a <title>, so a hover shows its
 * number without any script. Colours are given by the caller; text is escaped here.
 */
import type { ErrorHistogram } from '../harness/compare/metrics.js';

export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

const num = (x: number) => (x === 0 ? '0' : Math.abs(x) >= 1e-2 && Math.abs(x) < 1e4 ? x.toPrecision(3) : x.toExponential(2));
const px = (x: number) => x.toFixed(1);

export interface Series {
  name: string;
  color: string;
  dash?: string;
  /** one per label; null = not measured (mode did not run) */
  values: Array<number | null>;
}

export interface Threshold {
  value: number;
  label: string;
  color: string;
}

/**
 * Per-stage values on a log y axis. Zeros (exact agreement) sit on a "0" row below the axis, non-finite
 * values (Inf/NaN: a metric cannot be computed) on an "∞" row above it, so neither disappears silently.
 */
export function logLineChart(o: { id: string; title: string; labels: string[]; series: Series[]; thresholds?: Threshold[]; width?: number; height?: number; statuses?: string[] }): string {
  const W = o.width ?? 920;
  const H = o.height ?? 300;
  const m = { l: 64, r: 170, t: 34, b: 78 };
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  const n = Math.max(1, o.labels.length);
  const finite = o.series.flatMap((s) => s.values).filter((v): v is number => v !== null && Number.isFinite(v) && v > 0);
  for (const t of o.thresholds ?? []) finite.push(t.value);
  let lo = finite.length > 0 ? 10 ** Math.floor(Math.log10(Math.min(...finite))) : 1e-8;
  let hi = finite.length > 0 ? 10 ** Math.ceil(Math.log10(Math.max(...finite))) : 1;
  if (hi <= lo) hi = lo * 10;
  if (Math.log10(hi / lo) > 16) lo = hi / 1e16; // keep decades readable
  const zeroY = m.t + ph + 16;
  const infY = m.t - 14;
  const y = (v: number) => {
    if (!Number.isFinite(v)) return infY;
    if (v <= 0) return zeroY;
    const f = (Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo));
    return m.t + ph - f * ph;
  };
  const x = (i: number) => m.l + ((i + 0.5) * pw) / n;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="${esc(o.id)}" data-kind="line" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(o.title)}">`);
  parts.push(`<title>${esc(o.title)}</title>`);
  parts.push(`<text x="${m.l}" y="16" class="ctitle">${esc(o.title)}</text>`);
  // decade grid
  for (let e = Math.round(Math.log10(lo)); e <= Math.round(Math.log10(hi)); e++) {
    const yy = y(10 ** e);
    parts.push(`<line x1="${m.l}" x2="${m.l + pw}" y1="${px(yy)}" y2="${px(yy)}" class="grid"/>`);
    parts.push(`<text x="${m.l - 6}" y="${px(yy + 4)}" class="ylab" text-anchor="end">1e${e}</text>`);
  }
  parts.push(`<text x="${m.l - 6}" y="${px(zeroY + 4)}" class="ylab" text-anchor="end">0</text>`);
  parts.push(`<text x="${m.l - 6}" y="${px(infY + 4)}" class="ylab" text-anchor="end">∞</text>`);
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${pw}" height="${ph}" class="frame"/>`);
  // stage backgrounds by status, labels
  const every = Math.ceil(n / 28);
  o.labels.forEach((lab, i) => {
    const st = o.statuses?.[i];
    if (st === 'fail' || st === 'warn') parts.push(`<rect x="${px(m.l + (i * pw) / n)}" y="${m.t}" width="${px(pw / n)}" height="${ph}" class="bg-${st}"><title>${esc(lab)}: ${st}</title></rect>`);
    if (i % every === 0) parts.push(`<text transform="translate(${px(x(i))},${m.t + ph + 30}) rotate(-40)" class="xlab" text-anchor="end">${esc(lab)}</text>`);
  });
  const placed: Array<{ y: number; left: number }> = [];
  for (const t of o.thresholds ?? []) {
    const yy = y(t.value);
    parts.push(`<line x1="${m.l}" x2="${m.l + pw}" y1="${px(yy)}" y2="${px(yy)}" stroke="${t.color}" stroke-dasharray="6 4" class="thr"><title>${esc(t.label)}</title></line>`);
    // inside the plot, right-aligned just above its line: the right margin belongs to the legend (a label there
    // overlapped a legend entry whenever the threshold's height met the legend's); a label closer than a line
    // height to one already placed moves left of it
    let right = m.l + pw - 4;
    for (const p of placed) if (Math.abs(p.y - yy) < 14) right = Math.min(right, p.left - 10);
    placed.push({ y: yy, left: right - t.label.length * 6.5 });
    parts.push(`<text x="${px(right)}" y="${px(yy - 4)}" class="thrlab" fill="${t.color}" text-anchor="end">${esc(t.label)}</text>`);
  }
  o.series.forEach((s, si) => {
    const g: string[] = [];
    let run: string[] = [];
    const flush = () => {
      if (run.length > 1) g.push(`<polyline points="${run.join(' ')}" fill="none" stroke="${s.color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}/>`);
      run = [];
    };
    s.values.forEach((v, i) => {
      if (v === null) return flush();
      const pt = `${px(x(i))},${px(y(v))}`;
      if (Number.isFinite(v) && v > 0) run.push(pt);
      else flush();
      const shown = Number.isFinite(v) ? num(v) : String(v);
      const cls = !Number.isFinite(v) ? 'pt inf' : v === 0 ? 'pt zero' : 'pt';
      g.push(`<circle cx="${px(x(i))}" cy="${px(y(v))}" r="3.5" fill="${v === 0 ? 'white' : s.color}" stroke="${s.color}" class="${cls}" data-stage="${esc(o.labels[i])}"><title>${esc(o.labels[i])} · ${esc(s.name)} = ${shown}</title></circle>`);
    });
    flush();
    parts.push(`<g class="series" data-series="${esc(s.name)}">${g.join('')}</g>`);
    const ly = m.t + 8 + si * 18;
    parts.push(
      `<g class="legend" data-series="${esc(s.name)}"><line x1="${m.l + pw + 8}" x2="${m.l + pw + 30}" y1="${ly + 40}" y2="${ly + 40}" stroke="${s.color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}/><text x="${m.l + pw + 36}" y="${ly + 44}" class="leg">${esc(s.name)}</text></g>`,
    );
  });
  parts.push('</svg>');
  return parts.join('\n');
}

/**
 * |d − r| histograms (one colour per mode) over the fixed log bins, with the exact-zero, below-range,
 * above-range and non-finite counts as their own bars. Bar heights are log(1 + count): a handful of wild
 * elements next to thousands of fine ones must stay visible.
 */
export function histogramChart(o: { id: string; title: string; hists: Array<{ name: string; color: string; h: ErrorHistogram }>; width?: number; height?: number }): string {
  const W = o.width ?? 920;
  const H = o.height ?? 240;
  const m = { l: 56, r: 150, t: 30, b: 64 };
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  const first = o.hists[0]?.h;
  const nb = first?.counts.length ?? 0;
  // bin edges from the record's own binning (lo, per_decade), so the chart needs no code of the comparison
  const histEdge = (k: number) => (first === undefined ? 0 : first.lo * 10 ** (k / first.per_decade));
  const used = (k: number) => o.hists.some((x) => x.h.counts[k] > 0);
  let k0 = 0;
  let k1 = nb - 1;
  while (k0 < k1 && !used(k0)) k0++;
  while (k1 > k0 && !used(k1)) k1--;
  const cats: Array<{ label: string; get: (h: ErrorHistogram) => number; tip: string }> = [{ label: '0', get: (h) => h.zero, tip: 'exactly equal' }];
  cats.push({ label: '<lo', get: (h) => h.under, tip: `0 < |d−r| < ${num(histEdge(0))}` });
  for (let k = k0; k <= k1; k++) cats.push({ label: num(histEdge(k)), get: (h) => h.counts[k], tip: `[${num(histEdge(k))}, ${num(histEdge(k + 1))})` });
  cats.push({ label: '≥hi', get: (h) => h.over, tip: `|d−r| ≥ ${num(histEdge(nb))}` });
  cats.push({ label: 'NaN/Inf', get: (h) => h.nonfinite, tip: 'either path non-finite' });
  const maxC = Math.max(1, ...o.hists.flatMap((x) => cats.map((c) => c.get(x.h))));
  const hgt = (c: number) => (Math.log10(1 + c) / Math.log10(1 + maxC)) * ph;
  const cw = pw / cats.length;
  const bw = (cw * 0.8) / Math.max(1, o.hists.length);
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="${esc(o.id)}" data-kind="histogram" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(o.title)}">`);
  parts.push(`<title>${esc(o.title)}</title>`);
  parts.push(`<text x="${m.l}" y="16" class="ctitle">${esc(o.title)}</text>`);
  parts.push(`<rect x="${m.l}" y="${m.t}" width="${pw}" height="${ph}" class="frame"/>`);
  for (const c of [1, 10, 100, 1000, 10000, 100000, 1000000]) {
    if (c > maxC) break;
    const yy = m.t + ph - hgt(c);
    parts.push(`<line x1="${m.l}" x2="${m.l + pw}" y1="${px(yy)}" y2="${px(yy)}" class="grid"/><text x="${m.l - 6}" y="${px(yy + 4)}" class="ylab" text-anchor="end">${c}</text>`);
  }
  cats.forEach((c, ci) => {
    o.hists.forEach((x, hi) => {
      const v = c.get(x.h);
      if (v === 0) return;
      const bx = m.l + ci * cw + cw * 0.1 + hi * bw;
      const bh = hgt(v);
      parts.push(`<rect x="${px(bx)}" y="${px(m.t + ph - bh)}" width="${px(bw)}" height="${px(bh)}" fill="${x.color}" class="bar"><title>${esc(x.name)} ${esc(c.tip)}: ${v}</title></rect>`);
    });
    parts.push(`<text transform="translate(${px(m.l + ci * cw + cw / 2)},${m.t + ph + 14}) rotate(-40)" class="xlab" text-anchor="end">${esc(c.label)}</text>`);
  });
  parts.push(`<text x="${m.l + pw / 2}" y="${H - 4}" class="axlab" text-anchor="middle">|device − reference| (log bins); bar height log(1 + count)</text>`);
  o.hists.forEach((x, i) => {
    const ly = m.t + 10 + i * 18;
    parts.push(`<rect x="${m.l + pw + 10}" y="${ly - 8}" width="14" height="10" fill="${x.color}"/><text x="${m.l + pw + 30}" y="${ly + 1}" class="leg">${esc(x.name)}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n');
}
