/**
 * A small, strict XML 1.0 parser for the tests (no dependency): enough to prove a JUnit file is well formed
 * and to walk it. It rejects what a CI's JUnit reader would choke on: a missing or misplaced prolog, tags that
 * do not nest, duplicate or unquoted attributes, a bare `&` or `<` in text or attributes, entities other
 * than the five predefined ones and character references, characters outside XML's Char production, any
 * content after the root element, and more than one root.
 */

export interface XmlElement {
  name: string;
  attrs: Record<string, string>;
  children: XmlElement[];
  /** concatenated character data directly inside this element (entities decoded) */
  text: string;
}

const NAME = /^[A-Za-z_:][-A-Za-z0-9._:]*/;
const CHAR_OK = /^[\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]*$/u;
const PREDEFINED: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };

export class XmlError extends Error {}

export function parseXml(src: string): XmlElement {
  if (!CHAR_OK.test(src)) throw new XmlError('a character outside the XML 1.0 Char production');
  let i = 0;
  const fail = (msg: string): never => {
    const line = src.slice(0, i).split('\n').length;
    throw new XmlError(`${msg} (line ${line})`);
  };
  const ws = () => {
    while (i < src.length && ' \t\r\n'.includes(src[i])) i++;
  };
  const decode = (s: string, where: string): string =>
    s.replace(/&([^;]*);|&|</g, (m, ent: string | undefined) => {
      if (m === '<') return fail(`bare '<' in ${where}`);
      if (ent === undefined) return fail(`bare '&' in ${where}`);
      if (ent in PREDEFINED) return PREDEFINED[ent];
      const num = /^#(?:x([0-9A-Fa-f]+)|([0-9]+))$/.exec(ent);
      if (num === null) return fail(`unknown entity &${ent}; in ${where}`);
      const cp = num[1] !== undefined ? parseInt(num[1], 16) : parseInt(num[2], 10);
      const ch = String.fromCodePoint(cp);
      if (!CHAR_OK.test(ch)) return fail(`character reference &${ent}; is not an XML Char`);
      return ch;
    });
  const misc = () => {
    for (;;) {
      ws();
      if (src.startsWith('<!--', i)) {
        const end = src.indexOf('-->', i + 4);
        if (end < 0) fail('unterminated comment');
        if (src.slice(i + 4, end).includes('--')) fail("'--' inside a comment");
        i = end + 3;
      } else if (src.startsWith('<?', i) && !src.startsWith('<?xml', i)) {
        const end = src.indexOf('?>', i);
        if (end < 0) fail('unterminated processing instruction');
        i = end + 2;
      } else return;
    }
  };

  if (src.startsWith('\uFEFF')) i = 1;
  if (src.startsWith('<?xml', i)) {
    const end = src.indexOf('?>', i);
    if (end < 0) fail('unterminated XML declaration');
    const decl = src.slice(i, end);
    if (!/^<\?xml\s+version\s*=\s*(["'])1\.[0-9]+\1(\s+encoding\s*=\s*(["'])[A-Za-z][A-Za-z0-9._-]*\3)?(\s+standalone\s*=\s*(["'])(yes|no)\5)?\s*$/.test(decl)) fail('malformed XML declaration');
    i = end + 2;
  }
  misc();
  if (src.startsWith('<!DOCTYPE', i)) fail('DOCTYPE not supported (JUnit files have none)');

  const element = (): XmlElement => {
    if (src[i] !== '<') fail('expected an element');
    i++;
    const nm = NAME.exec(src.slice(i));
    if (nm === null) fail('bad element name');
    const name = nm![0];
    i += name.length;
    const attrs: Record<string, string> = {};
    for (;;) {
      const before = i;
      ws();
      if (src.startsWith('/>', i)) {
        i += 2;
        return { name, attrs, children: [], text: '' };
      }
      if (src[i] === '>') {
        i++;
        break;
      }
      if (i === before) fail(`expected whitespace before an attribute of <${name}>`);
      const an = NAME.exec(src.slice(i));
      if (an === null) fail(`bad attribute name in <${name}>`);
      i += an![0].length;
      ws();
      if (src[i] !== '=') fail(`attribute ${an![0]} of <${name}> has no '='`);
      i++;
      ws();
      const q = src[i];
      if (q !== '"' && q !== "'") fail(`attribute ${an![0]} of <${name}> is not quoted`);
      const end = src.indexOf(q, i + 1);
      if (end < 0) fail('unterminated attribute value');
      if (an![0] in attrs) fail(`duplicate attribute ${an![0]} in <${name}>`);
      attrs[an![0]] = decode(src.slice(i + 1, end), `attribute ${an![0]}`);
      i = end + 1;
    }
    const children: XmlElement[] = [];
    let text = '';
    for (;;) {
      if (i >= src.length) fail(`<${name}> is not closed`);
      if (src.startsWith('</', i)) {
        i += 2;
        const cn = NAME.exec(src.slice(i));
        if (cn === null || cn[0] !== name) fail(`</${cn?.[0] ?? '?'}> closes <${name}>`);
        i += name.length;
        ws();
        if (src[i] !== '>') fail(`bad closing tag of <${name}>`);
        i++;
        return { name, attrs, children, text };
      }
      if (src.startsWith('<![CDATA[', i)) {
        const end = src.indexOf(']]>', i);
        if (end < 0) fail('unterminated CDATA');
        text += src.slice(i + 9, end);
        i = end + 3;
      } else if (src.startsWith('<!--', i)) {
        misc();
      } else if (src.startsWith('<?', i)) {
        misc();
      } else if (src[i] === '<') {
        children.push(element());
      } else {
        const next = src.indexOf('<', i);
        const raw = src.slice(i, next < 0 ? src.length : next);
        if (raw.includes(']]>')) fail("']]>' in character data");
        text += decode(raw, `the text of <${name}>`);
        i = next < 0 ? src.length : next;
      }
    }
  };
  const root = element();
  misc();
  if (i !== src.length) fail('content after the root element');
  return root;
}

export function children(e: XmlElement, name: string): XmlElement[] {
  return e.children.filter((c) => c.name === name);
}
