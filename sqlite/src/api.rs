//! The few SQLite functions the VFS and the SQL function
//! `wbcache_stats()` call, reached one of two ways: from
//! the routine table SQLite hands a loadable extension (the shared library
//! must not link a SQLite of its own: the host process has one, perhaps
//! statically linked, and two would not share their VFS lists), or as the
//! linked symbols of a program that links SQLite itself (through
//! `libsqlite3-sys`, as rusqlite does).
//!
//! Invariant: every pointer in a [`SqliteApi`] stays valid for the life of
//! the process (the routine table is static data of the host's SQLite; the
//! extension is loaded permanently).

use std::ffi::{c_char, c_int, c_void};

use libsqlite3_sys as ffi;

/// Indexes of the routines used, in SQLite's `sqlite3_api_routines`
/// (`sqlite3ext.h`), a struct of function pointers that only ever grows at
/// its end, so these never move. A test checks them against the header.
pub mod routine_index {
    pub const FREE: usize = 58;
    pub const LIBVERSION_NUMBER: usize = 67;
    pub const MALLOC: usize = 68;
    pub const RESULT_ERROR: usize = 80;
    pub const RESULT_TEXT: usize = 85;
    pub const USER_DATA: usize = 101;
    pub const VFS_FIND: usize = 141;
    pub const VFS_REGISTER: usize = 142;
    pub const CREATE_FUNCTION_V2: usize = 162;
    pub const AUTO_EXTENSION: usize = 192;
}

type VfsFind = unsafe extern "C" fn(*const c_char) -> *mut ffi::sqlite3_vfs;
type VfsRegister = unsafe extern "C" fn(*mut ffi::sqlite3_vfs, c_int) -> c_int;
type Malloc = unsafe extern "C" fn(c_int) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut c_void);
type LibVersionNumber = unsafe extern "C" fn() -> c_int;
/// An SQL function's body (`xFunc`), and what frees its data (`xDestroy`).
pub type SqlFunction = unsafe extern "C" fn(*mut ffi::sqlite3_context, c_int, *mut *mut ffi::sqlite3_value);
pub type Destructor = unsafe extern "C" fn(*mut c_void);
type CreateFunctionV2 = unsafe extern "C" fn(
    *mut ffi::sqlite3,
    *const c_char,
    c_int,
    c_int,
    *mut c_void,
    Option<SqlFunction>,
    Option<SqlFunction>,
    Option<unsafe extern "C" fn(*mut ffi::sqlite3_context)>,
    Option<Destructor>,
) -> c_int;
type ResultText = unsafe extern "C" fn(*mut ffi::sqlite3_context, *const c_char, c_int, Option<Destructor>);
type ResultError = unsafe extern "C" fn(*mut ffi::sqlite3_context, *const c_char, c_int);
type UserData = unsafe extern "C" fn(*mut ffi::sqlite3_context) -> *mut c_void;
/// An extension's entry point, as `sqlite3_auto_extension` takes it.
pub type EntryPoint =
    unsafe extern "C" fn(*mut ffi::sqlite3, *mut *mut c_char, *const ffi::sqlite3_api_routines) -> c_int;
type AutoExtension = unsafe extern "C" fn(Option<EntryPoint>) -> c_int;

/// The SQLite functions the VFS and `wbcache_stats()` need, from one
/// SQLite.
#[derive(Clone, Copy)]
pub struct SqliteApi {
    pub vfs_find: VfsFind,
    pub vfs_register: VfsRegister,
    pub malloc: Malloc,
    pub free: Free,
    pub libversion_number: LibVersionNumber,
    pub create_function_v2: CreateFunctionV2,
    pub result_text: ResultText,
    pub result_error: ResultError,
    pub user_data: UserData,
    pub auto_extension: AutoExtension,
}

impl SqliteApi {
    /// The SQLite this program links (`libsqlite3-sys`).
    pub fn linked() -> SqliteApi {
        SqliteApi {
            vfs_find: ffi::sqlite3_vfs_find,
            vfs_register: ffi::sqlite3_vfs_register,
            malloc: ffi::sqlite3_malloc,
            free: ffi::sqlite3_free,
            libversion_number: ffi::sqlite3_libversion_number,
            create_function_v2: ffi::sqlite3_create_function_v2,
            result_text: ffi::sqlite3_result_text,
            result_error: ffi::sqlite3_result_error,
            user_data: ffi::sqlite3_user_data,
            auto_extension: ffi::sqlite3_auto_extension,
        }
    }

    /// The SQLite that is loading this extension, from its routine table.
    ///
    /// # Safety
    /// `routines` is the `const sqlite3_api_routines *` SQLite passed to the
    /// extension's entry point.
    pub unsafe fn from_routines(routines: *const c_void) -> Option<SqliteApi> {
        if routines.is_null() {
            return None;
        }
        let table = routines.cast::<*const c_void>();
        // SAFETY: the table is an array of function pointers at least as long
        // as SQLite 3.8.7 made it (which added `auto_extension`, the highest
        // index used; the extension needs 3.40); the caller guarantees it is
        // SQLite's.
        let at = |i: usize| unsafe { *table.add(i) };
        use routine_index as at_index;
        let entries = [
            at_index::VFS_FIND,
            at_index::VFS_REGISTER,
            at_index::MALLOC,
            at_index::FREE,
            at_index::LIBVERSION_NUMBER,
            at_index::CREATE_FUNCTION_V2,
            at_index::RESULT_TEXT,
            at_index::RESULT_ERROR,
            at_index::USER_DATA,
            at_index::AUTO_EXTENSION,
        ];
        if entries.iter().any(|&i| at(i).is_null()) {
            return None;
        }
        use std::mem::transmute;
        // SAFETY: each entry is the function of that signature, per
        // `sqlite3ext.h`, and non-NULL (checked above).
        unsafe {
            Some(SqliteApi {
                vfs_find: transmute::<*const c_void, VfsFind>(at(at_index::VFS_FIND)),
                vfs_register: transmute::<*const c_void, VfsRegister>(at(at_index::VFS_REGISTER)),
                malloc: transmute::<*const c_void, Malloc>(at(at_index::MALLOC)),
                free: transmute::<*const c_void, Free>(at(at_index::FREE)),
                libversion_number: transmute::<*const c_void, LibVersionNumber>(at(at_index::LIBVERSION_NUMBER)),
                create_function_v2: transmute::<*const c_void, CreateFunctionV2>(at(at_index::CREATE_FUNCTION_V2)),
                result_text: transmute::<*const c_void, ResultText>(at(at_index::RESULT_TEXT)),
                result_error: transmute::<*const c_void, ResultError>(at(at_index::RESULT_ERROR)),
                user_data: transmute::<*const c_void, UserData>(at(at_index::USER_DATA)),
                auto_extension: transmute::<*const c_void, AutoExtension>(at(at_index::AUTO_EXTENSION)),
            })
        }
    }

    /// `text` copied into memory from `sqlite3_malloc`, NUL-terminated (for
    /// strings SQLite frees: error messages, `SQLITE_FCNTL_VFSNAME`); NULL
    /// when out of memory.
    pub fn malloc_string(&self, text: &str) -> *mut c_char {
        let bytes: Vec<u8> = text.bytes().filter(|&b| b != 0).collect();
        let Ok(len) = c_int::try_from(bytes.len() + 1) else { return std::ptr::null_mut() };
        // SAFETY: `malloc` is SQLite's allocator (see the module invariant).
        let out = unsafe { (self.malloc)(len) }.cast::<u8>();
        if !out.is_null() {
            // SAFETY: `out` holds `len` bytes, `bytes.len() + 1` of which are
            // written here; the regions cannot overlap (fresh allocation).
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len());
                *out.add(bytes.len()) = 0;
            }
        }
        out.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::routine_index;

    /// The indexes match the system's `sqlite3ext.h`, compiled by the C
    /// compiler (skipped with a message where there is no compiler or
    /// header; under `CI=true` that is a failure).
    #[test]
    fn routine_indexes_match_the_header() {
        let dir = std::env::temp_dir().join(format!("wbcache-sqlite-api-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("offsets.c");
        std::fs::write(
            &src,
            "#include <stdio.h>\n#include <stddef.h>\n#include <sqlite3ext.h>\n\
             #define AT(f) (int)(offsetof(sqlite3_api_routines, f) / sizeof(void *))\n\
             int main(void) { printf(\"%d %d %d %d %d %d %d %d %d %d\\n\", AT(free), AT(libversion_number), \
             AT(malloc), AT(vfs_find), AT(vfs_register), AT(create_function_v2), AT(result_text), \
             AT(result_error), AT(user_data), AT(auto_extension)); return 0; }\n",
        )
        .unwrap();
        let exe = dir.join("offsets");
        let built = std::process::Command::new("cc").arg("-o").arg(&exe).arg(&src).status();
        if !matches!(built, Ok(s) if s.success()) {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "cc or sqlite3ext.h missing under CI");
            eprintln!("skipped: no C compiler or no sqlite3ext.h here");
            return;
        }
        let out = std::process::Command::new(&exe).output().unwrap();
        let got = String::from_utf8(out.stdout).unwrap();
        let want = [
            routine_index::FREE,
            routine_index::LIBVERSION_NUMBER,
            routine_index::MALLOC,
            routine_index::VFS_FIND,
            routine_index::VFS_REGISTER,
            routine_index::CREATE_FUNCTION_V2,
            routine_index::RESULT_TEXT,
            routine_index::RESULT_ERROR,
            routine_index::USER_DATA,
            routine_index::AUTO_EXTENSION,
        ]
        .map(|i| i.to_string())
        .join(" ")
            + "\n";
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            got, want,
            "sqlite3_api_routines indexes (free libversion_number malloc vfs_find vfs_register create_function_v2 \
             result_text result_error user_data auto_extension)"
        );
    }
}
