//! Names on disk against the reference (issue 2, "Must show" 3): for every
//! session the reference created in `../shared/corpus/normal`, the project
//! key of its header cwd and the encoded id are exactly the directories the
//! reference made, and every encoded id decodes back.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sessionfs::store::naming::{
    check_creatable_id, decode_id, encode_id, project_dir_name, project_key,
};
use sessionfs::store::StoreError;

fn normal_case() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/normal")
}

fn expected() -> Value {
    let text = fs::read_to_string(normal_case().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The `meta` of every `create` op, in order.
fn created() -> Vec<serde_json::Map<String, Value>> {
    let text = fs::read_to_string(normal_case().join("ops.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|op| op["op"] == "create")
        .map(|op| op["meta"].as_object().unwrap().clone())
        .collect()
}

/// id -> the one directory (`project/session/`) the reference made for it.
fn reference_dirs() -> BTreeMap<String, String> {
    let expected = expected();
    let mut out = BTreeMap::new();
    for s in expected["report"]["sessions"].as_array().unwrap() {
        let dirs = s["dirs"].as_array().unwrap();
        assert_eq!(dirs.len(), 1, "{s}");
        out.insert(
            s["id"].as_str().unwrap().to_string(),
            dirs[0].as_str().unwrap().to_string(),
        );
    }
    out
}

#[test]
fn keys_and_encoded_ids_are_the_reference_directories() {
    let dirs = reference_dirs();
    let mut checked = 0;
    for meta in created() {
        let id = meta["id"].as_str().unwrap();
        let Some(dir) = dirs.get(id) else {
            // Never appended (lazy creation) or refused at creation: no
            // directory (the refusals are checked below).
            continue;
        };
        let (project, session) = dir.trim_end_matches('/').split_once('/').unwrap();
        let cwd = meta.get("cwd").map(|c| c.as_str().unwrap());
        assert_eq!(project_dir_name(cwd).unwrap(), project, "cwd {cwd:?}");
        if let Some(cwd) = cwd {
            assert_eq!(project_key(cwd).unwrap(), project, "cwd {cwd:?}");
        }
        assert_eq!(encode_id(id).unwrap(), session, "id {id:?}");
        assert_eq!(decode_id(session).unwrap(), id, "dir {session:?}");
        // sessionfs could have created every one of them.
        assert_eq!(check_creatable_id(id).unwrap(), session);
        checked += 1;
    }
    // 23 sessions, one of them created twice (the second create failed).
    assert_eq!(checked, 24);
    assert_eq!(dirs.len(), 23);
}

#[test]
fn every_directory_of_the_root_is_a_canonical_name() {
    let root = normal_case().join("root");
    let dirs = reference_dirs();
    let mut sessions = 0;
    for project in fs::read_dir(&root).unwrap() {
        let project = project.unwrap();
        // The reference's project directories are keys some cwd derives,
        // so `mkdir` through the mount accepts each of them.
        let project_name = project.file_name().into_string().unwrap();
        if project_name != "_no-cwd" {
            assert_eq!(
                sessionfs::store::naming::non_canonical_key(&project_name),
                None,
                "{project_name}"
            );
        }
        for session in fs::read_dir(project.path()).unwrap() {
            let name = session.unwrap().file_name().into_string().unwrap();
            let id = decode_id(&name).unwrap();
            assert_eq!(encode_id(&id).unwrap(), name);
            let rel = format!("{}/{name}/", project.file_name().to_str().unwrap());
            assert_eq!(dirs.get(&id), Some(&rel), "{rel}");
            sessions += 1;
        }
    }
    assert_eq!(sessions, 23);
}

#[test]
fn ids_the_reference_refused_are_refused() {
    let expected = expected();
    for e in expected["writeErrors"].as_array().unwrap() {
        if e["op"] != "create" {
            continue;
        }
        let id = e["id"].as_str().unwrap();
        if id.is_empty() {
            assert!(matches!(encode_id(id), Err(StoreError::InvalidName { .. })));
        } else if e["code"] == "ENAMETOOLONG" {
            // The reference could not store it; sessionfs refuses to
            // create it, but can still name it.
            assert!(matches!(
                check_creatable_id(id),
                Err(StoreError::NameTooLong { .. })
            ));
            assert_eq!(decode_id(&encode_id(id).unwrap()).unwrap(), id);
        }
    }
}
