/**
 * Text from a checkpoint, a tokenizer, a saved run's manifest or a prompts file, made safe to print to a terminal:
 * an escape sequence in a tensor name or a decoded token could clear the screen, retitle the window or hide the
 * line after it (a shared repro bundle forged a "PASS" line that way). C0 and C1 control characters, DEL and the
 * bidirectional overrides and isolates are shown as `\xHH` / `\uHHHH`; line breaks too unless `keepLines` (a
 * generated text keeps its lines and tabs). Printable text, non-ASCII letters included, is left as it is.
 */
// matching control characters is this module's purpose
// eslint-disable-next-line no-control-regex
const UNPRINTABLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]|[\n\t]/g;
// eslint-disable-next-line no-control-regex
const UNPRINTABLE_KEEP_LINES = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

export function printable(s: string, keepLines = false): string {
  return s.replace(keepLines ? UNPRINTABLE_KEEP_LINES : UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
