//! A differential corpus of small scripts (bash, dash and Python) of the
//! kind people run every day: redirections (`>`, `>>`, `>|`, `2>>`,
//! `&>>`, `exec >`, `exec N>>`), group commands, loops and subshells
//! redirected into files, pipelines, here-documents, background jobs, and
//! the tools such scripts call (`xargs`, `tee`, `awk`, `make`, `find`,
//! `cp`, `sort -o`, `sed -i`, `dd`, `truncate`, `git`, `tar`, `sqlite3`),
//! and Python handing its open files to children (`subprocess`, `fork`).
//! Most write one file from several processes in turn, each inheriting
//! the descriptor (and the offset) from the one before: the case the
//! cache gets wrong if a process's view of a shared file outlives its
//! turn.
//!
//! Each script runs twice in a fresh directory: once on the kernel alone,
//! once with the library preloaded managing that directory (its children
//! inherit the preload, as under `wbcache run`). Both runs use the same
//! path (the kernel's tree is moved aside before the second run), so
//! output and files naming it agree without any rewriting. The exit
//! status, stdout, stderr and every file of the tree (names, types,
//! permissions, bytes; a symlink's target), read afterwards by this
//! process, must be the same, and the preloaded run must not print a
//! `wbcache:` complaint: a script cannot tell the cache from the kernel.
//! Every case runs even when some fail; the failure lists them all. A
//! second test shows the library really is loaded into each interpreter
//! (run as the corpus runs it), so that the corpus cannot pass vacuously.
//!
//! `SHELL_CORPUS_CASES=name,name` runs only those cases;
//! `SHELL_CORPUS_SELF_CHECK=1` runs every script twice on the kernel
//! instead, which finds a script that is not deterministic by itself.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use common::{plain, preloaded, python, run, tool, Scratch, OPTIONS, TIMEOUT};

/// What runs a case's script (with `-c SCRIPT`).
#[derive(Clone, Copy, Debug)]
enum Interpreter {
    Bash,
    Dash,
    Python,
}

/// One script and what it needs.
#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    interpreter: Interpreter,
    /// Run with `-c`, after its common indentation is removed.
    script: &'static str,
    /// Programs it runs beyond coreutils (a missing one skips the case).
    needs: &'static [&'static str],
    /// Paths (relative to the directory) whose bytes legitimately differ
    /// from run to run (timestamps inside), left out with all beneath.
    unstable: &'static [&'static str],
}

impl Case {
    const fn new(name: &'static str, interpreter: Interpreter, script: &'static str) -> Case {
        Case { name, interpreter, script, needs: &[], unstable: &[] }
    }

    const fn bash(name: &'static str, script: &'static str) -> Case {
        Case::new(name, Interpreter::Bash, script)
    }

    const fn dash(name: &'static str, script: &'static str) -> Case {
        Case::new(name, Interpreter::Dash, script)
    }

    const fn python(name: &'static str, script: &'static str) -> Case {
        Case::new(name, Interpreter::Python, script)
    }

    const fn needs(self, needs: &'static [&'static str]) -> Case {
        Case { needs, ..self }
    }

    const fn unstable(self, unstable: &'static [&'static str]) -> Case {
        Case { unstable, ..self }
    }
}

/// The commands of the bug report, as reported (the `ls` lists a
/// directory the script makes, so that its output is fixed).
const REPORTED: &[Case] = &[
    Case::bash("reported_bash_appends_after_printf", "printf 'hello world\\n' > f; bash -c 'echo appended >> f'"),
    Case::bash("reported_sh_group_into_file", "sh -c '{ /bin/echo one; /bin/echo two; } > g'").needs(&["sh"]),
    Case::bash("reported_sh_loop_into_file", "sh -c 'for i in 1 2 3; do /bin/echo line$i; done > h'").needs(&["sh"]),
    Case::bash(
        "reported_exec_into_log",
        "mkdir d; touch d/x d/y; \
         bash -c 'exec > log 2>&1; echo start; ls d; date +%Y-%m-%d >/dev/null; echo end'",
    ),
    Case::python(
        "reported_python_three_echoes",
        r"
        import subprocess
        with open('k', 'w') as f:
            subprocess.run(['/bin/echo', 'x'], stdout=f)
            subprocess.run(['/bin/echo', 'x'], stdout=f)
            subprocess.run(['/bin/echo', 'x'], stdout=f)
        ",
    ),
];

/// The shells' redirections, builtins (written by the shell itself) and
/// external commands (by a child) taking turns on one file.
const REDIRECTIONS: &[Case] = &[
    Case::dash(
        "dash_truncates_longer_files",
        "seq 1 1000 > f; echo short > f; /bin/echo shorter > g; seq 1 500 > g; /bin/echo x > g; cat f g",
    ),
    Case::dash("dash_appends_builtin_and_external", "echo a >> f; /bin/echo b >> f; echo c >> f; /bin/echo d >> f"),
    Case::bash("bash_appends_builtin_and_external", "echo a >> f; /bin/echo b >> f; echo c >> f; /bin/echo d >> f"),
    Case::dash(
        "dash_exec_stdout_interleaved",
        r"
        exec 4>&1 > out
        echo 1; /bin/echo 2; printf '3\n'; /usr/bin/printf '4\n'; echo 5
        exec >&4
        cat out
        ",
    ),
    Case::bash(
        "bash_exec_stdout_interleaved",
        r"
        exec 4>&1 > out
        echo 1; /bin/echo 2; printf '3\n'; /usr/bin/printf '4\n'; echo 5
        exec >&4
        cat out
        ",
    ),
    Case::bash(
        "bash_exec_appends_stdout",
        "echo first > log; exec 4>&1 >> log; echo second; /bin/echo third; seq 1 3; exec >&4; cat log",
    ),
    Case::dash(
        "dash_exec_fd3_appends",
        "echo zero > f; exec 3>>f; echo a >&3; /bin/echo b >&3; exec 3>&-; echo c >> f; cat f",
    ),
    Case::bash(
        "bash_exec_fd5_appends",
        "echo zero > f; exec 5>>f; echo a >&5; /bin/echo b >&5; seq 1 3 >&5; exec 5>&-; cat f",
    ),
    // Scripts own descriptors 3 to 9 (`exec N>`): whatever the library
    // keeps open must not be where a script puts its files.
    Case::dash(
        "dash_exec_fds_3_to_9",
        r#"
        for n in 3 4 5 6 7 8 9; do echo "seed$n" > "f$n"; done
        exec 3>>f3 4>>f4 5>>f5 6>>f6 7>>f7 8>>f8 9>>f9
        for n in 3 4 5 6 7 8 9; do eval "echo builtin$n >&$n; /bin/echo external$n >&$n"; done
        exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-
        cat f3 f4 f5 f6 f7 f8 f9
        "#,
    ),
    Case::bash(
        "bash_exec_fds_3_to_9",
        r#"
        for n in 3 4 5 6 7 8 9; do echo "seed$n" > "f$n"; done
        exec 3>>f3 4>>f4 5>>f5 6>>f6 7>>f7 8>>f8 9>>f9
        for n in 3 4 5 6 7 8 9; do echo "builtin$n" >&$n; /bin/echo "external$n" >&$n; done
        exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-
        cat f3 f4 f5 f6 f7 f8 f9
        "#,
    ),
    Case::dash("dash_group_into_file", "{ echo a; /bin/echo b; echo c; /bin/echo d; } > g; cat g"),
    Case::bash("bash_group_then_group_appended", "{ echo a; /bin/echo b; } > g; { /bin/echo c; echo d; } >> g; cat g"),
    Case::dash(
        "dash_loop_mixed_into_file",
        "for i in 1 2 3; do echo b$i; /bin/echo e$i; done > h; for i in 4 5; do /bin/echo e$i; done >> h",
    ),
    Case::bash("bash_loop_external_into_file", "for i in 1 2 3; do /bin/echo line$i; done > h; cat h"),
    Case::dash(
        "dash_subshells_into_file",
        "( echo a; /bin/echo b; echo c ) > f; ( /bin/echo d; ( echo e; /bin/echo f ) ) >> f",
    ),
    Case::bash(
        "bash_subshells_into_file",
        "( echo a; /bin/echo b; echo c ) > f; ( /bin/echo d; ( echo e; /bin/echo f ) ) >> f",
    ),
    Case::dash(
        "dash_noclobber_and_override",
        "set -C; echo a > f; echo b > f || echo refused; echo c >| f; /bin/echo d >| f; cat f",
    ),
    Case::bash("bash_noclobber_and_override", "set -C; echo a > f; echo b > f || echo refused; echo c >| f; cat f"),
    Case::dash(
        "dash_stderr_appended",
        "ls missing1 2>> err; ls missing2 2>> err; { echo e1 >&2; /bin/echo e2 >&2; } 2>> err; cat err",
    ),
    Case::bash(
        "bash_stdout_and_stderr_appended",
        "{ echo out; echo err >&2; } &>> both; /bin/echo x &>> both; ls nope &>> both; cat both",
    ),
    Case::dash(
        "dash_background_appends",
        "echo fg > f; ( echo bg >> f ) & wait; /bin/echo bg2 >> f & wait; echo after >> f; cat f",
    ),
    Case::bash(
        "bash_nested_shells_append",
        r#"echo 1 > f; bash -c 'echo 2 >> f; sh -c "echo 3 >> f; /bin/echo 4 >> f"'; echo 5 >> f; cat f"#,
    )
    .needs(&["sh"]),
    Case::dash(
        "dash_large_output_through_exec",
        "exec 4>&1 > big; seq 1 20000; echo end; /bin/echo ext; exec >&4; tail -n 3 big; wc -c big",
    ),
];

/// Reading back what the same script wrote a moment before, here-docs,
/// pipelines, and files renamed, linked and removed.
const READ_BACK: &[Case] = &[
    Case::dash(
        "dash_heredocs_into_file",
        r"
        cat > f <<EOF
        one
        two $((1 + 2))
        EOF
        cat >> f <<'EOF'
        literal $HOME
        EOF
        cat f
        ",
    ),
    Case::bash(
        "bash_heredoc_and_herestring",
        r#"
        cat > f <<EOF
        one
        EOF
        tr a-z A-Z <<< "here string" >> f
        cat f
        "#,
    ),
    Case::dash("dash_cat_concatenates", "printf 'a\\n' > a; seq 1 1000 > b; cat a b > c; cat c a > d; wc -c c d"),
    Case::dash(
        "dash_head_tail_of_fresh_files",
        "seq 1 1000 > n; head -c 100 n > h; tail -n 3 n > t; echo x >> n; tail -n 2 n; head -c 20 h; cat t",
    ),
    Case::dash(
        "dash_read_modify_write_loops",
        r#"
        printf 'a\nb\nc\n' > in
        while read l; do echo "$l!"; done < in > out
        while read l; do /bin/echo "$l?" >> out2; done < out
        cat out2
        "#,
    ),
    Case::bash(
        "bash_read_modify_write_in_place",
        r#"
        seq 1 5 > in
        while IFS= read -r l; do echo "<$l>"; done < in > out
        mv out in
        while IFS= read -r l; do printf '%s.\n' "$l"; done < in > out
        cat out
        "#,
    ),
    Case::dash("dash_read_builtin_after_write", r#"echo hello > f; read x < f; echo "$x world" > g; read y < g; echo "$y!""#),
    Case::dash(
        "dash_pipelines_into_files",
        "printf '3\\n1\\n2\\n' | sort > sorted; seq 1 50 | grep 7 | tr 7 X > sevens; cat sorted sevens | wc -l > count; \
         cat count",
    ),
    Case::dash(
        "dash_mv_rm_ln_in_script",
        "echo a > x; mv x y; echo b >> y; ln -s y z; echo c >> z; echo d > w; rm w; ln y hard; echo e >> hard; cat y; ls",
    ),
    Case::dash(
        "dash_hard_links_share_data",
        "echo a > f; ln f g; echo b >> g; /bin/echo c >> f; cat g; stat -c '%h %s' f g",
    ),
    Case::dash(
        "dash_sizes_seen_by_test_and_stat",
        "
        : > e; [ -s e ] || echo empty
        echo x > e; [ -s e ] && echo nonempty; stat -c %s e
        /bin/echo yy >> e; stat -c %s e; wc -c < e
        ",
    ),
    // The offset a builtin leaves is where a child goes on, reading or
    // writing.
    Case::dash(
        "dash_reads_then_child_continues",
        r#"seq 1 10 > f; { read a; read b; echo "got $a $b"; cat; } < f"#,
    ),
    Case::bash(
        "bash_reads_then_child_continues",
        r#"seq 1 10 > f; { read a; read b; echo "got $a $b"; cat; } < f"#,
    ),
    Case::dash(
        "dash_read_write_open_overwrites",
        "printf 'abcdefgh\\n' > f; exec 3<>f; printf XY >&3; /usr/bin/printf Z >&3; exec 3>&-; cat f",
    ),
    Case::dash(
        "dash_directory_trees",
        "mkdir -p a/b/c; echo x > a/b/c/f; seq 1 999 > a/n; cp -r a b; rm -r a/b; echo y >> b/n; ls -R a b",
    ),
];

/// The everyday tools scripts call on their files.
const TOOLS: &[Case] = &[
    Case::dash(
        "dash_xargs_runs_appenders",
        r#"printf 'a\nb\nc\n' | xargs -n1 sh -c 'echo "$0" >> x; /bin/echo "$0$0" >> x'; printf 'p q r\n' | xargs touch; ls"#,
    )
    .needs(&["xargs", "sh"]),
    Case::bash(
        "bash_tee_appends",
        "seq 1 5 | tee a | tr 1-5 a-e > b; echo one > t; echo two | tee -a t; echo three | tee -a t t2 > /dev/null; cat t t2",
    )
    .needs(&["tee"]),
    Case::dash(
        "dash_awk_redirections",
        r#"
        printf '1\n2\n3\n4\n' | awk '{ print "line " $0 > "all"; if ($0 % 2) print >> "odd"; else print > "even" }'
        echo pre > pre
        awk 'BEGIN { print "x" >> "pre"; print "y" > "fresh"; print "z" > "fresh" }'
        cat all odd even pre fresh
        "#,
    )
    .needs(&["awk"]),
    Case::dash(
        "dash_make_recipes",
        r"
        printf 'all: t1 t2\n\t@echo all >> log\nt1: src\n\t@cat src > t1\n\t@echo built t1 >> log\n' > Makefile
        printf 't2: t1\n\t@sed s/a/b/ t1 > t2\n\t@/bin/echo built t2 >> log\n' >> Makefile
        echo aaa > src
        make; make; cat log t2
        ",
    )
    .needs(&["make"]),
    Case::dash(
        "dash_find_exec",
        r#"
        mkdir -p d/a d/b; echo x > d/a/f.txt; echo y > d/b/g.txt
        find d -name '*.txt' -exec sh -c 'cat "$1" > "$1.copy"; /bin/echo "$1" >> found' _ {} \;
        sort -o found found
        find d -name '*.copy' -exec cat {} + | sort > copies
        cat found copies
        "#,
    )
    .needs(&["find", "sh"]),
    Case::dash(
        "dash_cp_archive_tree",
        "mkdir -p t/a/b; echo 1 > t/a/f; seq 1 3000 > t/a/b/big; ln -s a/f t/link; chmod 640 t/a/f; \
         cp -a t u; echo more >> u/a/f; cat t/a/f u/link",
    ),
    Case::dash(
        "dash_cp_reflink_auto",
        "seq 1 20000 > big; cp --reflink=auto big big2; echo tail >> big2; cp --reflink=auto big2 big3; \
         cmp big2 big3 && echo same",
    ),
    Case::dash(
        "dash_sort_in_place",
        "printf 'c\\na\\nb\\n' > f; sort -o f f; seq 1 2000 | sort -r > n; sort -n -o n n; head -n 3 n; cat f",
    )
    .needs(&["sort"]),
    Case::dash(
        "dash_sed_in_place",
        "printf 'a\\nb\\nc\\n' > s; sed -i 's/b/B/' s; sed -i.bak '1d' s; cat s s.bak; \
         printf 'a\\nb\\nc\\n' | sed -n -e '/b/w bfile' -e '/c/w cfile'; cat bfile cfile",
    )
    .needs(&["sed"]),
    Case::dash(
        "dash_dd_notrunc",
        "seq 1 200 > d; printf 'XXXX' | dd of=d bs=1 seek=10 conv=notrunc status=none; \
         dd if=d of=e bs=16 skip=2 count=3 status=none; \
         seq 1 100000 > big; dd if=/dev/zero of=big bs=4096 seek=3 count=2 conv=notrunc status=none; \
         cksum big; head -c 40 d",
    ),
    Case::dash(
        "dash_truncate_sizes",
        "seq 1 100 > t; truncate -s 50 t; truncate -s 200 t; truncate -s +10 t; wc -c t; od -An -c t | tail -n 2; \
         : > t2; truncate -s 1M t2; echo end >> t2; wc -c t2",
    ),
    Case::dash(
        "dash_split_and_join",
        "seq 1 1000 > n; split -l 300 n part.; cat part.* > joined; cmp n joined && echo same; ls",
    ),
    Case::dash(
        "dash_gzip_roundtrip",
        "seq 1 5000 > n; gzip -nk n; gzip -dc n.gz > m; cmp n m && echo same; gzip -n9 < m > m.gz; ls",
    )
    .needs(&["gzip"]),
    Case::dash(
        "dash_tar_roundtrip",
        "mkdir -p src/a; echo 1 > src/a/f; seq 1 5000 > src/g; ln -s g src/link; \
         tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf arc.tar src; \
         mkdir out; tar -xf arc.tar -C out; tar -tf arc.tar; cmp src/g out/src/g && echo same",
    )
    .needs(&["tar"]),
    Case::dash(
        "dash_sqlite_dump",
        r#"
        sqlite3 db "create table t(a, b); insert into t values (1, 'x'), (2, 'y');"
        sqlite3 db "insert into t select a + 2, b || b from t;"
        sqlite3 db .dump > dump.sql
        sqlite3 db 'select count(*), sum(a) from t'
        cat dump.sql
        "#,
    )
    .needs(&["sqlite3"]),
    // Git's index holds stat data (times, inode numbers) and so differs
    // from run to run: the repository is compared through git's answers.
    Case::bash(
        "bash_git_commits",
        r"
        export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
        export GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z
        git init -q -b main repo && cd repo
        echo hello > a; mkdir d; seq 1 100 > d/n
        git -c user.name=a -c user.email=b add a d
        git -c user.name=a -c user.email=b commit -q -m first
        echo more >> a
        git -c user.name=a -c user.email=b commit -q -am second
        git cat-file -p 'HEAD^{tree}'; git log --format='%H %s'
        git fsck --no-progress; echo fsck=$?
        git status --short
        ",
    )
    .needs(&["git"])
    .unstable(&["repo/.git"]),
];

/// Python handing its open files to children, and reading back what
/// they and it wrote.
const PYTHON: &[Case] = &[
    Case::python(
        "python_flushes_around_children",
        r"
        import subprocess
        with open('k', 'w') as f:
            f.write('before\n')
            f.flush()
            subprocess.run(['/bin/echo', 'x'], stdout=f)
            f.write('middle\n')
            f.flush()
            subprocess.run(['/bin/echo', 'y'], stdout=f)
            f.write('after\n')
        print(open('k').read(), end='')
        ",
    ),
    // Python's buffer reaches the file only at close, after the child's
    // line (the shared offset puts it after that line).
    Case::python(
        "python_unflushed_before_child",
        r"
        import subprocess
        with open('k', 'w') as f:
            f.write('buffered\n')
            subprocess.run(['/bin/echo', 'x'], stdout=f)
        print(open('k').read(), end='')
        ",
    ),
    Case::python(
        "python_append_mode_children",
        r"
        import subprocess
        with open('k', 'w') as f:
            f.write('first\n')
        with open('k', 'a') as f:
            for word in ['x', 'y', 'z']:
                subprocess.run(['/bin/echo', word], stdout=f)
                f.write(word.upper() + '\n')
                f.flush()
        print(open('k').read(), end='')
        ",
    ),
    Case::python(
        "python_child_cats_open_file",
        r"
        import subprocess
        f = open('k', 'w')
        f.write('abc\n')
        f.flush()
        subprocess.run(['cat', 'k'])
        f.write('def\n')
        f.flush()
        subprocess.run(['cat', 'k'])
        subprocess.run(['wc', '-c', 'k'])
        f.close()
        ",
    ),
    Case::python(
        "python_fork_child_writes_first",
        r"
        import os
        f = open('k', 'w')
        f.write('parent-before\n')
        f.flush()
        pid = os.fork()
        if pid == 0:
            f.write('child\n')
            f.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        f.write('parent-after\n')
        f.close()
        print(open('k').read(), end='')
        ",
    ),
    Case::python(
        "python_shell_appends_while_open",
        r"
        import subprocess
        with open('k', 'a') as f:
            f.write('parent\n')
            f.flush()
            subprocess.run('echo a >> k; /bin/echo b >> k', shell=True)
            f.write('parent again\n')
        print(open('k').read(), end='')
        ",
    ),
    Case::python(
        "python_replaces_atomically",
        r"
        import os, subprocess
        with open('t', 'w') as f:
            f.write('old\n')
        for i in range(3):
            with open('t.tmp', 'w') as f:
                f.write('version %d\n' % i)
                f.flush()
                os.fsync(f.fileno())
            os.replace('t.tmp', 't')
            subprocess.run(['cat', 't'])
        ",
    ),
    Case::python(
        "python_large_child_output",
        r"
        import subprocess
        with open('k', 'w') as f:
            f.write('head\n')
            f.flush()
            subprocess.run(['seq', '1', '50000'], stdout=f)
            f.write('tail\n')
        with open('k') as f:
            lines = f.read().splitlines()
        print(len(lines), lines[:2], lines[-2:])
        ",
    ),
    Case::python(
        "python_child_reads_from_offset",
        r"
        import os, subprocess
        with open('k', 'w') as f:
            f.write('0123456789\n' * 3)
        fd = os.open('k', os.O_RDONLY)
        print(os.read(fd, 4), flush=True)
        subprocess.run(['head', '-c', '9'], stdin=fd)
        print(flush=True)
        print(os.read(fd, 8))
        ",
    ),
    // A shared mapping is the file: a child reading it sees what was
    // stored through the mapping, and the mapping sees a later write.
    Case::python(
        "python_mmap_then_child_reads",
        r"
        import mmap, subprocess
        with open('k', 'w+b') as f:
            f.write(b'abcdefgh' * 1024)
            f.flush()
            m = mmap.mmap(f.fileno(), 0)
            m[0:4] = b'WXYZ'
            subprocess.run(['head', '-c', '8', 'k'])
            f.seek(8)
            f.write(b'12345678')
            f.flush()
            print(m[0:16])
            m.close()
        ",
    ),
    Case::python(
        "python_ioctls_on_a_file",
        r"
        import fcntl, os, struct
        fd = os.open('i', os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b'abcdefgh')
        os.lseek(fd, 3, os.SEEK_SET)
        print('FIONREAD', struct.unpack('i', fcntl.ioctl(fd, 0x541B, bytes(4)))[0])
        for name, request in (('TCGETS', 0x5401), ('TIOCGWINSZ', 0x5413)):
            try:
                fcntl.ioctl(fd, request, bytes(64))
            except OSError as e:
                print(name, e.errno)
        fcntl.ioctl(fd, 0x5421, struct.pack('i', 1))  # FIONBIO
        print('nonblock', bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK))
        fcntl.ioctl(fd, 0x5421, struct.pack('i', 0))
        print('nonblock', bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK))
        os.write(fd, b'XY')
        os.close(fd)
        ",
    ),
    Case::python(
        "python_dup_onto_a_closed_standard_descriptor",
        r"
        import os, subprocess
        fd = os.open('d', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b'before\n')
        os.close(1)
        # os.dup is fcntl(F_DUPFD_CLOEXEC): the lowest free number, 1.
        assert os.dup(fd) == 1
        os.write(1, b'through one\n')
        os.write(fd, b'through fd\n')
        os.close(fd)
        subprocess.run(['/bin/echo', 'child'], stdout=1, close_fds=False)
        os.close(1)
        with open('d') as source, open('copy', 'w') as copy:
            copy.write(source.read())
        ",
    ),
    Case::python(
        "python_dup2_onto_fds_3_to_9",
        r"
        import os, subprocess
        for n in range(3, 10):
            fd = os.open('f%d' % n, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if fd != n:
                os.dup2(fd, n)
                os.close(fd)
            os.write(n, b'python %d\n' % n)
            subprocess.run(['/bin/echo', 'child %d' % n], stdout=n)
        for n in range(3, 10):
            os.close(n)
        subprocess.run(['cat'] + ['f%d' % n for n in range(3, 10)])
        ",
    ),
];

/// Every case of the corpus.
fn cases() -> impl Iterator<Item = &'static Case> {
    REPORTED.iter().chain(REDIRECTIONS).chain(READ_BACK).chain(TOOLS).chain(PYTHON)
}

/// The script without the indentation its lines share (so that scripts
/// can be indented in the table, here-documents and Python included).
fn dedent(script: &str) -> String {
    let script = script.trim_start_matches('\n');
    let indent = script.lines().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min();
    let indent = indent.unwrap_or(0);
    script.lines().map(|l| format!("{}\n", l.get(indent..).unwrap_or(""))).collect()
}

/// One entry of a directory tree, as the comparison sees it.
#[derive(PartialEq)]
enum Entry {
    Dir { mode: u32 },
    File { mode: u32, bytes: Vec<u8> },
    Symlink(PathBuf),
    Other(String),
}

/// A directory's entries by their paths within it.
type Tree = BTreeMap<PathBuf, Entry>;

/// Reads the tree under `root` (as this process, without the library),
/// leaving out the `unstable` paths.
fn read_tree(root: &Path, unstable: &[&str]) -> Tree {
    let mut tree = Tree::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(root.join(&dir)).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = dir.join(entry.unwrap().file_name());
            if unstable.iter().any(|u| path == Path::new(u)) {
                continue;
            }
            let full = root.join(&path);
            let meta = std::fs::symlink_metadata(&full).unwrap();
            let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777;
            let kind = meta.file_type();
            let entry = if kind.is_symlink() {
                Entry::Symlink(std::fs::read_link(&full).unwrap())
            } else if kind.is_dir() {
                pending.push(path.clone());
                Entry::Dir { mode }
            } else if kind.is_file() {
                Entry::File { mode, bytes: std::fs::read(&full).unwrap() }
            } else {
                Entry::Other(format!("{kind:?}"))
            };
            tree.insert(path, entry);
        }
    }
    tree
}

/// How one run of a script ended, and what it left.
struct Outcome {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    tree: Tree,
}

/// The script's command: run in `dir`, under the library managing `dir`
/// when `preload`, with settings that make the scripts' output fixed.
fn command(program: &Path, case: &Case, dir: &Path, preload: bool) -> Command {
    let mut cmd = if preload { preloaded(program, &[dir], OPTIONS) } else { plain(program) };
    cmd.arg("-c").arg(dedent(case.script)).current_dir(dir).env("PWD", dir);
    cmd.env("LC_ALL", "C").env("TZ", "UTC").env("PYTHONHASHSEED", "0").env("PYTHONDONTWRITEBYTECODE", "1");
    // A `make` or `git` the test itself runs under must not steer theirs.
    for inherited in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"] {
        cmd.env_remove(inherited);
    }
    cmd
}

/// Runs `case` once in the fresh directory `dir`; a run that times out is
/// a failure of the case (the others still run), not of the whole test.
fn run_once(program: &Path, case: &Case, dir: &Path, preload: bool) -> Result<Outcome, String> {
    std::fs::create_dir_all(dir).unwrap();
    let cmd = command(program, case, dir, preload);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cmd, TIMEOUT))).map_err(|panic| {
        let message = panic.downcast_ref::<String>().cloned();
        let message = message.or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
        format!("the {} run did not finish: {message}", if preload { "preloaded" } else { "kernel's" })
    })?;
    let tree = read_tree(dir, case.unstable);
    Ok(Outcome { status: out.status, stdout: out.stdout, stderr: out.stderr, tree })
}

/// The first offset where `a` and `b` differ (the shorter one's length if
/// one is a prefix of the other).
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

/// Describes how two byte strings differ: where, and both contents (or
/// the bytes around the first difference, when they are long).
fn describe_bytes(what: &str, kernel: &[u8], cached: &[u8]) -> Option<String> {
    const SHORT: usize = 1000;
    if kernel == cached {
        return None;
    }
    let at = first_difference(kernel, cached);
    let mut text = format!(
        "{what}: kernel {} bytes, preloaded {} bytes, first difference at byte {at}",
        kernel.len(),
        cached.len()
    );
    let (from, shown) =
        if kernel.len().max(cached.len()) <= SHORT { (0, SHORT) } else { (at.saturating_sub(100), 300) };
    let excerpt = |bytes: &[u8]| {
        let end = bytes.len().min(from + shown);
        format!("{:?}", String::from_utf8_lossy(bytes.get(from..end).unwrap_or(&[])))
    };
    let place = if from == 0 { String::new() } else { format!(" (from byte {from})") };
    text.push_str(&format!("\n    kernel{place}:    {}\n    preloaded{place}: {}", excerpt(kernel), excerpt(cached)));
    Some(text)
}

/// Describes how one path's entries differ between the two trees.
fn describe_entry(path: &Path, kernel: Option<&Entry>, cached: Option<&Entry>) -> Option<String> {
    let name = path.display();
    let kind = |entry: &Entry| match entry {
        Entry::Dir { mode } => format!("directory {mode:o}"),
        Entry::File { mode, bytes } => format!("file {mode:o}, {} bytes", bytes.len()),
        Entry::Symlink(target) => format!("symlink to {}", target.display()),
        Entry::Other(kind) => kind.clone(),
    };
    match (kernel, cached) {
        (Some(k), Some(c)) if k == c => None,
        (Some(Entry::File { mode: km, bytes: kb }), Some(Entry::File { mode: cm, bytes: cb })) if km == cm => {
            describe_bytes(&format!("file {name}"), kb, cb)
        }
        (Some(k), Some(c)) => Some(format!("{name}: kernel {}, preloaded {}", kind(k), kind(c))),
        (Some(k), None) => Some(format!("{name}: only after the kernel's run ({})", kind(k))),
        (None, Some(c)) => Some(format!("{name}: only after the preloaded run ({})", kind(c))),
        (None, None) => None,
    }
}

/// Everything that tells the two runs apart (nothing when they agree).
fn differences(kernel: &Outcome, cached: &Outcome, preloaded_run: bool) -> Vec<String> {
    let mut found = Vec::new();
    if kernel.status != cached.status {
        found.push(format!("how it ended: kernel {}; preloaded {}", kernel.status, cached.status));
    }
    found.extend(describe_bytes("stdout", kernel.stdout.as_bytes(), cached.stdout.as_bytes()));
    found.extend(describe_bytes("stderr", kernel.stderr.as_bytes(), cached.stderr.as_bytes()));
    if preloaded_run {
        // The dynamic linker's refusal too: a library rebuilt meanwhile.
        let ours = |l: &&str| l.starts_with("wbcache:") || l.contains("cannot be preloaded");
        let complaints: Vec<&str> = cached.stderr.lines().filter(ours).collect();
        if !complaints.is_empty() {
            found.push(format!("the library complained:\n    {}", complaints.join("\n    ")));
        }
    }
    let paths: BTreeSet<&PathBuf> = kernel.tree.keys().chain(cached.tree.keys()).collect();
    for path in paths {
        found.extend(describe_entry(path, kernel.tree.get(path), cached.tree.get(path)));
    }
    found
}

/// What became of one case.
enum Verdict {
    Identical,
    /// The report: the case, its script and the differences.
    Differs(String),
    /// Its interpreter or a program it needs is missing.
    Skipped,
}

/// Whether the second run of each case goes through the library (or, to
/// check the corpus itself, the kernel again).
fn second_run_preloaded() -> bool {
    std::env::var("SHELL_CORPUS_SELF_CHECK").map_or(true, |v| v.is_empty() || v == "0")
}

/// The interpreter of `case`, if it and every program it needs are here.
fn interpreter(case: &Case) -> Option<PathBuf> {
    let program = match case.interpreter {
        Interpreter::Bash => tool("bash")?,
        Interpreter::Dash => tool("dash")?,
        Interpreter::Python => python()?,
    };
    case.needs.iter().all(|name| tool(name).is_some()).then_some(program)
}

/// Runs `case` on the kernel, then (at the same path, the kernel's tree
/// moved aside) under the library, and compares the two.
fn check(case: &Case, scratch: &Scratch) -> Verdict {
    let Some(program) = interpreter(case) else { return Verdict::Skipped };
    let root = scratch.dir(case.name);
    let (work, aside) = (root.join("work"), root.join("kernel"));
    let preload = second_run_preloaded();
    let kernel = run_once(&program, case, &work, false);
    std::fs::rename(&work, &aside).unwrap();
    let cached = run_once(&program, case, &work, preload);
    let mut found = match (&kernel, &cached) {
        (Ok(kernel), Ok(cached)) => differences(kernel, cached, preload),
        (kernel, cached) => [kernel.as_ref().err(), cached.as_ref().err()].into_iter().flatten().cloned().collect(),
    };
    // Every script ends in a command that succeeds: one that fails on the
    // kernel has a mistake that would hide what it means to test.
    if let Some(kernel) = kernel.as_ref().ok().filter(|k| !k.status.success()) {
        found.push(format!("the script fails on the kernel itself ({}): the case is broken", kernel.status));
    }
    let _ = std::fs::remove_dir_all(&root);
    if found.is_empty() {
        return Verdict::Identical;
    }
    let script = dedent(case.script);
    let second = if preload { "preloaded run" } else { "second kernel run (\"preloaded\" below)" };
    Verdict::Differs(format!(
        "=== {} ({:?}) differs between the kernel's run and the {second}\n--- script:\n{script}--- differences:\n  {}\n",
        case.name,
        case.interpreter,
        found.join("\n  ")
    ))
}

/// The cases `SHELL_CORPUS_CASES` names (all of them when unset).
fn selected() -> Vec<&'static Case> {
    let wanted = std::env::var("SHELL_CORPUS_CASES").unwrap_or_default();
    let wanted: Vec<&str> = wanted.split(',').map(str::trim).filter(|w| !w.is_empty()).collect();
    let chosen: Vec<&'static Case> = cases().filter(|c| wanted.is_empty() || wanted.contains(&c.name)).collect();
    assert!(!chosen.is_empty(), "SHELL_CORPUS_CASES={wanted:?} names no case");
    chosen
}

#[test]
fn scripts_cannot_tell_the_cache_from_the_kernel() {
    let scratch = Scratch::new("shell-corpus");
    let (mut ran, mut skipped, mut failed) = (0, 0, Vec::new());
    for case in selected() {
        match check(case, &scratch) {
            Verdict::Skipped => skipped += 1,
            Verdict::Identical => ran += 1,
            Verdict::Differs(report) => {
                println!("{report}");
                ran += 1;
                failed.push(case.name);
            }
        }
    }
    println!("{} of {ran} cases identical to the kernel ({skipped} skipped)", ran - failed.len());
    assert!(failed.is_empty(), "{} of {ran} cases differ from the kernel: {}", failed.len(), failed.join(", "));
}

/// The table itself: names unique (they name the scratch directories and
/// the failures), and the corpus as large as it is meant to be.
#[test]
fn cases_are_named_uniquely() {
    let mut names = BTreeSet::new();
    for case in cases() {
        assert!(names.insert(case.name), "two cases are named {}", case.name);
    }
    assert!(names.len() >= 40, "only {} cases", names.len());
}

/// The library really is loaded into each interpreter the corpus runs,
/// as the corpus runs them (else the corpus would pass vacuously): a
/// process that cached a file appends its statistics to `WBCACHE_STATS`
/// at exit.
#[test]
fn the_library_is_loaded_into_every_interpreter() {
    let scratch = Scratch::new("shell-corpus-loaded");
    let probes = [
        Case::bash("bash_writes", "echo x > f"),
        Case::dash("dash_writes", "echo x > f"),
        Case::python("python_writes", "open('f', 'w').write('x')"),
    ];
    for case in &probes {
        let Some(program) = interpreter(case) else { continue };
        let (dir, stats) = (scratch.dir(case.name), scratch.path(&format!("{}.stats", case.name)));
        let mut cmd = command(&program, case, &dir, true);
        cmd.env("WBCACHE_STATS", &stats);
        let out = run(cmd, TIMEOUT).ok().no_complaints(&[]);
        let lines = std::fs::read_to_string(&stats).unwrap_or_default().lines().count();
        assert!(lines > 0, "{}: no process cached anything: not preloaded?\n{}", case.name, out.details());
    }
}
