// SPDX-License-Identifier: GPL-2.0
/*
 * meld-loader: load meld.bpf.o, pin its maps, register its congestion controls.
 *
 *   meld-loader OBJECT PIN_DIR [VAR=NAME ...]
 *
 * Renames the tcp_congestion_ops variable VAR to the congestion control NAME (at most
 * 15 characters; the kernel's list of congestion controls is global, so two PEP
 * instances need distinct names), loads the object, pins every map as PIN_DIR/<map>
 * and every test program as PIN_DIR/prog_<name>, and registers each struct_ops
 * through a BPF link pinned as PIN_DIR/link_<NAME>. The registration lives as long
 * as that pin: unlinking it unregisters the congestion control (sockets already using
 * it keep it until they close), and a bpffs that disappears takes it along, so no
 * registration outlives the PEP that owns it. PIN_DIR must not exist yet.
 *
 * Prints one JSON object on success: {"pin_dir": ..., "ops": {VAR: NAME, ...}}.
 * Exit status 1 with a message on stderr otherwise. Needs CAP_BPF + CAP_NET_ADMIN
 * (root) and a kernel with BTF and BPF struct_ops links (Linux >= 6.4).
 *
 * Debian 12's libbpf (1.1) predates ".struct_ops.link", so the link is made here:
 * the map is created with BPF_F_LINK, filled by bpf_map__attach_struct_ops() (which
 * then only stores the value) and registered with BPF_LINK_CREATE.
 */
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#ifndef BPF_F_LINK
#define BPF_F_LINK (1U << 13)
#endif
#define ATTACH_STRUCT_OPS 44	/* enum bpf_attach_type BPF_STRUCT_OPS (Linux 6.4) */
#define BPF_FS_MAGIC 0xcafe4a11
#define CA_NAME_MAX 16		/* TCP_CA_NAME_MAX, with the NUL */
#define MAX_RENAMES 8

struct rename {
	const char *var;
	const char *name;
};

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("meld-loader: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static void *read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	void *buf;
	long n;

	if (!f)
		die("%s: %s", path, strerror(errno));
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		die("%s: cannot size", path);
	buf = malloc(n);
	if (!buf || fread(buf, 1, n, f) != (size_t)n)
		die("%s: short read", path);
	fclose(f);
	*size = n;
	return buf;
}

/*
 * File offset of the struct_ops variable `var`: its symbol's value in .struct_ops plus
 * that section's offset. (The object's BTF still says 0 for every variable of the
 * section: libbpf fixes those offsets up from the symbol table when it opens it.)
 */
static size_t var_file_offset(void *buf, size_t size, const char *var)
{
	Elf *elf;
	Elf_Scn *scn = NULL, *ops = NULL, *symtab = NULL;
	size_t shstrndx, off = 0;
	GElf_Shdr sh, symsh;
	GElf_Sym sym;
	Elf_Data *data;

	elf_version(EV_CURRENT);
	elf = elf_memory(buf, size);
	if (!elf || elf_getshdrstrndx(elf, &shstrndx))
		die("not an ELF object: %s", elf_errmsg(-1));
	while ((scn = elf_nextscn(elf, scn))) {
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_SYMTAB)
			symtab = scn;
		else if (!strcmp(elf_strptr(elf, shstrndx, sh.sh_name), ".struct_ops"))
			ops = scn;
	}
	if (!ops || !symtab)
		die("no .struct_ops section or symbol table in the object");
	gelf_getshdr(ops, &sh);
	gelf_getshdr(symtab, &symsh);
	data = elf_getdata(symtab, NULL);
	for (size_t i = 0; data && i < symsh.sh_size / symsh.sh_entsize; i++) {
		if (!gelf_getsym(data, i, &sym) || sym.st_shndx != elf_ndxscn(ops))
			continue;
		if (!strcmp(elf_strptr(elf, symsh.sh_link, sym.st_name), var)) {
			off = sh.sh_offset + sym.st_value;
			break;
		}
	}
	elf_end(elf);
	if (!off)
		die("no struct_ops variable %s in the object", var);
	return off;
}

/* Offset of the `name` member in the type of the struct_ops variable `var`. */
static size_t name_member_offset(const struct btf *btf, const char *var)
{
	const struct btf_type *t;
	const struct btf_member *m;
	int var_id = btf__find_by_name_kind(btf, var, BTF_KIND_VAR);

	if (var_id < 0)
		die("no BTF for struct_ops variable %s", var);
	t = btf__type_by_id(btf, btf__type_by_id(btf, var_id)->type);
	m = btf_members(t);
	for (int i = 0; i < btf_vlen(t); i++, m++)
		if (!strcmp(btf__name_by_offset(btf, m->name_off), "name"))
			return m->offset / 8;
	die("struct_ops variable %s has no name member", var);
	return 0;
}

/* Write the new congestion control names into the object image before loading it. */
static void rename_ops(const char *object, void *buf, size_t size, const struct rename *r,
		       int n)
{
	struct btf *btf;

	if (n == 0)
		return;
	btf = btf__parse_elf(object, NULL);
	if (!btf)
		die("%s has no BTF: %s", object, strerror(errno));
	for (int i = 0; i < n; i++) {
		char *field = (char *)buf + var_file_offset(buf, size, r[i].var) +
			      name_member_offset(btf, r[i].var);

		if (strlen(r[i].name) >= CA_NAME_MAX)
			die("congestion control name %s is longer than %d", r[i].name,
			    CA_NAME_MAX - 1);
		memset(field, 0, CA_NAME_MAX);
		memcpy(field, r[i].name, strlen(r[i].name));
	}
	btf__free(btf);
}

/* bpffs must be mounted where we pin; mount it on /sys/fs/bpf if nothing is there. */
static void ensure_bpffs(const char *pin_dir)
{
	char parent[PATH_MAX];
	struct statfs st;
	char *slash;

	snprintf(parent, sizeof(parent), "%s", pin_dir);
	slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = '\0';
	mkdir(parent, 0700);
	if (statfs(parent, &st) == 0 && st.f_type == BPF_FS_MAGIC)
		return;
	if (mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"))
		die("mount bpffs on /sys/fs/bpf: %s", strerror(errno));
	mkdir(parent, 0700);
	if (statfs(parent, &st) || st.f_type != BPF_FS_MAGIC)
		die("%s is not on a bpf filesystem", parent);
}

static const char *new_name(const struct rename *r, int n, const char *var)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(r[i].var, var))
			return r[i].name;
	return var;
}

static void pin_fd(int fd, const char *dir, const char *prefix, const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s%s", dir, prefix, name);
	if (bpf_obj_pin(fd, path))
		die("pin %s: %s", path, strerror(errno));
}

static int register_ops(struct bpf_map *map)
{
	struct bpf_link *fill = bpf_map__attach_struct_ops(map);
	int fd;

	if (!fill)
		die("fill struct_ops %s: %s", bpf_map__name(map), strerror(errno));
	bpf_link__disconnect(fill);	/* not a real link: only frees on destroy */
	bpf_link__destroy(fill);
	fd = bpf_link_create(bpf_map__fd(map), 0, ATTACH_STRUCT_OPS, NULL);
	if (fd < 0)
		die("register %s: %s", bpf_map__name(map), strerror(errno));
	return fd;
}

int main(int argc, char **argv)
{
	struct rename renames[MAX_RENAMES];
	const char *object, *pin_dir;
	struct bpf_object *obj;
	struct bpf_program *prog;
	struct bpf_map *map;
	char path[PATH_MAX];
	size_t size;
	void *buf;
	int n = 0, first = 1;

	if (argc < 3 || argc - 3 > MAX_RENAMES) {
		fprintf(stderr, "usage: %s OBJECT PIN_DIR [VAR=NAME ...]\n", argv[0]);
		return 2;
	}
	object = argv[1];
	pin_dir = argv[2];
	for (int i = 3; i < argc; i++, n++) {
		char *eq = strchr(argv[i], '=');

		if (!eq)
			die("expected VAR=NAME, got %s", argv[i]);
		*eq = '\0';
		renames[n] = (struct rename){ argv[i], eq + 1 };
	}

	libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
	buf = read_file(object, &size);
	rename_ops(object, buf, size, renames, n);
	ensure_bpffs(pin_dir);
	if (mkdir(pin_dir, 0700))
		die("%s: %s (stale pins must be removed first)", pin_dir, strerror(errno));

	obj = bpf_object__open_mem(buf, size, NULL);
	if (!obj)
		die("open %s: %s", object, strerror(errno));
	bpf_object__for_each_map(map, obj) {
		if (bpf_map__type(map) == BPF_MAP_TYPE_STRUCT_OPS) {
			bpf_map__set_map_flags(map, bpf_map__map_flags(map) | BPF_F_LINK);
		} else {
			snprintf(path, sizeof(path), "%s/%s", pin_dir, bpf_map__name(map));
			bpf_map__set_pin_path(map, path);
		}
	}
	if (bpf_object__load(obj))
		die("load %s: %s (see the verifier log above)", object, strerror(errno));

	bpf_object__for_each_program(prog, obj)
		if (bpf_program__type(prog) == BPF_PROG_TYPE_SYSCALL)
			pin_fd(bpf_program__fd(prog), pin_dir, "prog_", bpf_program__name(prog));

	printf("{\"pin_dir\": \"%s\", \"ops\": {", pin_dir);
	bpf_object__for_each_map(map, obj) {
		const char *name;

		if (bpf_map__type(map) != BPF_MAP_TYPE_STRUCT_OPS)
			continue;
		name = new_name(renames, n, bpf_map__name(map));
		pin_fd(register_ops(map), pin_dir, "link_", name);
		printf("%s\"%s\": \"%s\"", first ? "" : ", ", bpf_map__name(map), name);
		first = 0;
	}
	printf("}}\n");
	bpf_object__close(obj);
	free(buf);
	return 0;
}
