// Images attached to the next prompt of a session (docs/turns-and-providers.md#images):
// checked here when attached (the first bytes say PNG, JPEG, GIF or WebP; at most
// 20 MiB, 16 per prompt), sent as `agentd/turn`'s `images: [{path}]` (the daemon reads
// and checks them again, stores each once and gives it to the provider).

import * as fs from "node:fs";
import * as path from "node:path";

export const MAX_IMAGE_BYTES = 20 * 1024 * 1024;
export const MAX_IMAGES = 16;
/** The extensions the file picker offers. */
export const IMAGE_EXTENSIONS = ["png", "jpg", "jpeg", "gif", "webp"];

export interface AttachedImage {
  /** Absolute. */
  path: string;
  mime: string;
  bytes: number;
}

/** The media type of an image's first bytes, if it is a PNG, JPEG, GIF or WebP. */
export function imageMime(b: Uint8Array): string | undefined {
  const starts = (sig: number[], at = 0) => sig.every((x, i) => b[at + i] === x);
  const ascii = (s: string) => [...s].map((c) => c.charCodeAt(0));
  if (starts([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return "image/png";
  if (starts([0xff, 0xd8, 0xff])) return "image/jpeg";
  if (starts(ascii("GIF87a")) || starts(ascii("GIF89a"))) return "image/gif";
  if (b.length >= 12 && starts(ascii("RIFF")) && starts(ascii("WEBP"), 8)) return "image/webp";
  return undefined;
}

/** Checks `file` (absolute, or relative to `base`) is an image within the limits;
 * throws an error naming the file otherwise. */
export function checkImage(file: string, base = process.cwd()): AttachedImage {
  const abs = path.resolve(base, file);
  const name = path.basename(abs);
  let st: fs.Stats;
  try {
    st = fs.statSync(abs);
  } catch (e) {
    throw new Error(`image ${name}: ${(e as Error).message}`);
  }
  if (!st.isFile()) throw new Error(`image ${name}: not a regular file`);
  if (st.size > MAX_IMAGE_BYTES) {
    throw new Error(`image ${name}: ${st.size} bytes, over the 20 MiB limit`);
  }
  const head = Buffer.alloc(12);
  const fd = fs.openSync(abs, "r");
  let n: number;
  try {
    n = fs.readSync(fd, head, 0, 12, 0);
  } finally {
    fs.closeSync(fd);
  }
  const mime = imageMime(head.subarray(0, n));
  if (!mime) throw new Error(`image ${name}: not a PNG, JPEG, GIF or WebP image`);
  return { path: abs, mime, bytes: st.size };
}

/** The images waiting for each session's next prompt. */
export class PendingImages {
  private bySession = new Map<string, AttachedImage[]>();

  /** Checks and attaches `files` to `sessionId`'s next prompt; the images attached
   * now. Nothing is attached when any file is refused. */
  attach(sessionId: string, files: string[], base?: string): AttachedImage[] {
    const checked = files.map((f) => checkImage(f, base));
    const list = this.list(sessionId);
    if (list.length + checked.length > MAX_IMAGES) {
      throw new Error(`a prompt carries at most ${MAX_IMAGES} images`);
    }
    this.bySession.set(sessionId, [...list, ...checked]);
    return checked;
  }

  list(sessionId: string): AttachedImage[] {
    return this.bySession.get(sessionId) ?? [];
  }

  clear(sessionId: string): void {
    this.bySession.delete(sessionId);
  }

  /** A short line naming the attached images, e.g. `2 images: a.png, b.gif`. */
  describe(sessionId: string): string {
    const l = this.list(sessionId);
    if (!l.length) return "";
    return `${l.length} image${l.length > 1 ? "s" : ""}: ${l.map((i) => path.basename(i.path)).join(", ")}`;
  }

  /** `params` with the session's images added as `images: [{path}]`; they stay
   * attached until [`clear`] (after the daemon accepted the turn). */
  turnParams(sessionId: string, params: Record<string, unknown>): Record<string, unknown> {
    const l = this.list(sessionId);
    return l.length ? { ...params, images: l.map((i) => ({ path: i.path })) } : params;
  }
}
