//! Issue 16.5 for streams: stream names, groups and document ids are never paths. Generated
//! hostile names (traversal, separators, NUL, dots, escapes, look-alikes, bidirectional
//! controls, very long runs) are refused with `InvalidInput`, or a stream name is one plain
//! directory right under the root and a group or id is only bytes inside the collection's
//! files: the collection holds its usual files and nothing else, nothing appears beside the
//! root, and every accepted document reads back under exactly its group and id, after a
//! reopen too (no two names fold into one).

mod common;
#[path = "../../cellar-core/tests/support/names.rs"]
mod names;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use cellar_core::CellarError;
use cellar_search::doc::MAX_ID_BYTES as MAX_KEY_BYTES;
use cellar_stream::Streams;
use common::{doc, doc_ins, options, DIM};
use names::generated_names;

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

fn streams(root: &Path) -> Streams {
    Streams::open(root, options(1 << 16)).unwrap()
}

#[test]
fn stream_names_groups_and_ids_never_reach_the_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("streams");
    let all = streams(&root);
    let (mut refused, mut created) = (0, 0);
    for name in generated_names(300, 165) {
        let valid = cellar_core::ids::check_name("stream name", &name).is_ok();
        match all.put_batch(&name, DIM, doc_ins(&[doc("g", "d", 1)])) {
            Ok(_) => {
                assert!(valid, "{name:?} was accepted");
                created += 1;
            }
            Err(CellarError::InvalidInput(m)) => {
                assert!(!valid && m.contains("stream name"), "{name:?}: {m}");
                refused += 1;
            }
            Err(e) => panic!("{name:?}: {e:?}"),
        }
    }
    assert!(refused > 150 && created > 0, "{refused} refused, {created} created");
    for entry in listing(&root) {
        assert!(cellar_core::ids::check_name("stream name", &entry).is_ok(), "{entry:?} under the root");
    }

    // Groups and ids: bytes inside the files of one collection.
    let mut accepted = HashMap::new();
    let keys = generated_names(400, 166);
    for (i, pair) in keys.chunks(2).enumerate() {
        let (group, id) = (&pair[0], &pair[1]);
        let mut d = doc(group, id, i as u64);
        d.group.clone_from(group);
        d.id.clone_from(id);
        d.metadata.clear(); // the keys alone are under test
        let valid = [group, id]
            .iter()
            .all(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES && !k.chars().any(char::is_control));
        match all.put_batch("keys", DIM, doc_ins(&[d.clone()])) {
            Ok(_) => {
                assert!(valid, "{group:?} / {id:?} accepted");
                accepted.insert((group.clone(), id.clone()), d.text);
            }
            Err(CellarError::InvalidInput(m)) => assert!(!valid, "{group:?} / {id:?}: {m}"),
            Err(e) => panic!("{group:?} / {id:?}: {e:?}"),
        }
    }
    assert!(accepted.len() > 20, "{} accepted", accepted.len());
    let check = |all: &Streams| {
        let keys = all.get("keys", None).unwrap();
        for ((group, id), text) in &accepted {
            assert_eq!(&keys.get(group, id).unwrap().text, text, "{group:?} / {id:?}");
        }
        keys.flush().unwrap();
        // The grouped index's files, and in `live/` its log, manifest and segments: no name
        // comes from a group or an id.
        let files = listing(keys.dir());
        let index_files =
            ["LOCK", "bm25", "index.json", "live", "pooled.bin", "text_offsets.bin", "texts.bin", "vectors"];
        assert!(files.iter().all(|f| index_files.contains(&f.as_str())), "{files:?}");
        let live = listing(&keys.dir().join("live"));
        assert!(
            live.iter().all(|f| ["wal.log", "MANIFEST.json", "LOCK"].contains(&f.as_str())
                || (f.starts_with("seg-")
                    && f[4..].chars().all(|c| c.is_ascii_hexdigit() || c == '-' || c.is_ascii_lowercase()))),
            "{live:?}"
        );
    };
    check(&all);
    drop(all);
    let all = streams(&root);
    check(&all);
    assert_eq!(listing(tmp.path()), BTreeSet::from(["streams".to_string()]), "nothing beside the root");
}
