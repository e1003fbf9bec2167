use super::*;
use std::os::unix::fs::symlink;

/// The only test that switches the strategy (the switch holds for the whole process);
/// the others hold under either.
#[test]
fn both_strategies_refuse_every_way_out_and_open_what_is_inside() {
    for walk in [false, true] {
        force_component_walk(walk);
        let ws = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("s"), "outside").unwrap();
        std::fs::create_dir_all(ws.path().join("d/e")).unwrap();
        std::fs::write(ws.path().join("d/f"), "in").unwrap();
        symlink(out.path(), ws.path().join("abs")).unwrap();
        symlink("d", ws.path().join("inner")).unwrap();
        let root = open_root(ws.path()).unwrap();
        let read = |fd: OwnedFd| {
            let mut s = String::new();
            std::fs::File::from(fd).read_to_string(&mut s).unwrap();
            s
        };
        for resolve in [BENEATH, NO_SYMLINKS] {
            let e = open_beneath(&root, Path::new("abs/s"), libc::O_RDONLY, resolve).unwrap_err();
            assert!(
                is_escape(&e) || e.raw_os_error() == Some(libc::ENOTDIR),
                "{walk} {resolve}: {e}"
            );
            let e = open_beneath(&root, Path::new("../x"), libc::O_RDONLY, resolve).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{walk} {resolve}: {e}");
            let e = open_beneath(&root, Path::new("/etc"), libc::O_RDONLY, resolve).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{walk} {resolve}: {e}");
            let f = open_beneath(&root, Path::new("d/f"), libc::O_RDONLY, resolve).unwrap();
            assert_eq!(read(f), "in");
        }
        // A symlink that stays inside: followed only with openat2 and `BENEATH`.
        let inner = open_beneath(&root, Path::new("inner/f"), libc::O_RDONLY, BENEATH);
        match walk {
            false => assert_eq!(read(inner.unwrap()), "in"),
            true => assert!(inner.is_err()),
        }
        let e = open_beneath(&root, Path::new("inner/f"), libc::O_RDONLY, NO_SYMLINKS).unwrap_err();
        assert!(
            is_escape(&e) || e.raw_os_error() == Some(libc::ENOTDIR),
            "{e}"
        );
        // Directories: the root itself, one below, and a symlink refused as one.
        let top = open_dir_beneath(&root, Path::new("")).unwrap();
        assert!(stat_at(&top, OsStr::new("d")).unwrap().is_some());
        let e = open_dir_beneath(&root, Path::new("d/e")).unwrap();
        assert!(list(&e).unwrap().is_empty());
        let err = open_dir_beneath(&root, Path::new("abs")).unwrap_err();
        assert!(
            is_escape(&err) || err.raw_os_error() == Some(libc::ENOTDIR),
            "{err}"
        );
        let err = open_dir_beneath(&root, Path::new("d/f")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{err}");
        assert_eq!(strategy(), if walk { "component-walk" } else { "openat2" });
    }
    force_component_walk(false);
}

#[test]
fn one_name_at_a_time_never_through_a_symlink() {
    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("s"), "outside").unwrap();
    std::fs::create_dir(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("f"), "0123456789").unwrap();
    symlink(out.path().join("s"), ws.path().join("link")).unwrap();
    let root = open_root(ws.path()).unwrap();

    let mut names = list(&root).unwrap();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<(String, Kind)> = names
        .into_iter()
        .map(|(n, k)| (n.to_string_lossy().into_owned(), k))
        .collect();
    let kinds = |n: &str| names.iter().find(|(m, _)| m == n).map(|(_, k)| *k);
    assert_eq!(
        names.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["d", "f", "link"]
    );
    // A file system may not say (`Unknown`); when it does, it is right.
    assert!(matches!(kinds("d"), Some(Kind::Dir | Kind::Unknown)));
    assert!(matches!(kinds("link"), Some(Kind::Link | Kind::Unknown)));

    let st = stat_at(&root, OsStr::new("link")).unwrap().unwrap();
    assert_eq!(kind_of(&st), Kind::Link);
    assert!(stat_at(&root, OsStr::new("missing")).unwrap().is_none());
    assert_eq!(
        read_link_at(&root, OsStr::new("link")).unwrap(),
        out.path().join("s").as_os_str().as_bytes()
    );
    let e = open_at(&root, OsStr::new("link"), libc::O_RDONLY).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    let e = read_file_at(&root, OsStr::new("link"), 100).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));

    // Read up to the cap plus one byte, so the caller sees it was passed.
    let (st, body) = read_file_at(&root, OsStr::new("f"), 4).unwrap();
    assert_eq!((st.st_size, body.as_slice()), (10, &b"01234"[..]));
    let (_, body) = read_file_at(&root, OsStr::new("f"), 100).unwrap();
    assert_eq!(body, b"0123456789");

    // A FIFO in a file's place is refused before a byte is read, without waiting for a
    // writer.
    let fifo = cstr(ws.path().join("fifo").as_os_str()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let e = read_file_at(&root, OsStr::new("fifo"), 100).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");

    // Writes: a new file never replaces an entry or goes through a link.
    let e = create_new(&root, OsStr::new("link")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    assert_eq!(
        std::fs::read_to_string(out.path().join("s")).unwrap(),
        "outside"
    );
    use std::io::Write;
    create_new(&root, OsStr::new("tmp"))
        .unwrap()
        .write_all(b"new")
        .unwrap();
    rename_in(&root, OsStr::new("tmp"), OsStr::new("f")).unwrap();
    sync_dir(&root).unwrap();
    assert_eq!(std::fs::read_to_string(ws.path().join("f")).unwrap(), "new");
    mkdir_in(&root, OsStr::new("m"), 0o700).unwrap();
    symlink_in(&root, b"../elsewhere", OsStr::new("l2")).unwrap();
    assert_eq!(
        std::fs::read_link(ws.path().join("l2")).unwrap(),
        Path::new("../elsewhere")
    );
    unlink_in(&root, OsStr::new("l2")).unwrap();
    rmdir_in(&root, OsStr::new("m")).unwrap();
    let e = rmdir_in(&root, OsStr::new("d2")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    assert!(!ws.path().join("m").exists() && !ws.path().join("l2").exists());
    let e = open_at(&root, OsStr::new("a\0b"), libc::O_RDONLY).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
}

#[cfg(target_os = "linux")]
#[test]
fn an_absolute_path_through_no_symlink_and_its_proc_name() {
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().canonicalize().unwrap();
    std::fs::create_dir(ws.join("d")).unwrap();
    symlink(ws.join("d"), ws.join("l")).unwrap();
    let flags = libc::O_PATH | libc::O_NOFOLLOW;
    let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let d = openat2(CWD, &ws.join("d"), flags, resolve).unwrap();
    assert!(is_dir(&fstat(&d).unwrap()));
    assert_eq!(std::fs::read_link(proc_path(&d)).unwrap(), ws.join("d"));
    // The last component a symlink: `O_PATH | O_NOFOLLOW` hands the link itself back.
    let l = openat2(CWD, &ws.join("l"), flags, resolve).unwrap();
    assert!(is_link(&fstat(&l).unwrap()));
    let e = openat2(CWD, &ws.join("l/x"), flags, resolve).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
}
