/*
 * acl.c - POSIX access ACLs, as the kernel's posix_acl.c has them for
 * ext4: the system.posix_acl_access xattr (the kernel's format: version 2,
 * then 8-byte entries tag, perm, id, little-endian, sorted by tag and id)
 * and the mode bits it goes with.
 *
 * Invariants:
 *  (1) an inode's mode bits are its ACL's user::, mask:: (group:: when
 *      there is no mask) and other:: entries: setting an ACL sets them
 *      (acl_to_mode), chmod sets those entries (acl_chmod);
 *  (2) an ACL that says no more than the mode (three entries) is not
 *      stored, so an inode without the xattr is checked by its mode alone;
 *  (3) a new inode in a directory with a default ACL gets it, cut to the
 *      mode asked for, as access ACL (and as default ACL if a directory),
 *      and the umask is not applied; without one the umask is
 *      (posix_acl_create; acl_create);
 *  (4) access is decided as posix_acl_permission(): the owner by user::,
 *      a named user by its entry and the mask, the groups the caller is in
 *      (owning and named) by any of their entries that grants all asked
 *      for, and the mask, else other::.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define ACL_NAME "system.posix_acl_access"
#define ACL_DEFAULT "system.posix_acl_default"
enum { A_USER_OBJ = 0x01, A_USER = 0x02, A_GROUP_OBJ = 0x04, A_GROUP = 0x08,
       A_MASK = 0x10, A_OTHER = 0x20 };

struct acl_ent {
	uint16_t ae_tag, ae_perm;
	uint32_t ae_id;
};

static void ent_get(const uint8_t *p, size_t i, struct acl_ent *e)
{
	memcpy(&e->ae_tag, p + 4 + 8 * i, 2);
	memcpy(&e->ae_perm, p + 4 + 8 * i + 2, 2);
	memcpy(&e->ae_id, p + 4 + 8 * i + 4, 4);
}

/* Checks the header and the tags; the number of entries or -EINVAL. */
static ssize_t acl_count(const void *value, size_t size)
{
	uint32_t version;

	if (size < 4 || (size - 4) % 8)
		return -EINVAL;
	memcpy(&version, value, 4);
	if (version != 2)
		return -EINVAL;
	return (ssize_t)((size - 4) / 8);
}

int acl_to_mode(const void *value, size_t size, mode_t *mode)
{
	int user = -1, group = -1, mask = -1, other = -1, extended = 0;
	ssize_t n = acl_count(value, size);
	struct acl_ent e;

	if (n < 0)
		return (int)n;
	for (ssize_t i = 0; i < n; i++) {
		ent_get(value, (size_t)i, &e);
		int perm = e.ae_perm & 7;
		switch (e.ae_tag) {
		case A_USER_OBJ: user = perm; break;
		case A_GROUP_OBJ: group = perm; break;
		case A_MASK: mask = perm; break;
		case A_OTHER: other = perm; break;
		case A_USER: case A_GROUP: extended = 1; break;
		default: return -EINVAL;
		}
	}
	if (user < 0 || group < 0 || other < 0 || (extended && mask < 0))
		return -EINVAL;
	*mode = (*mode & ~(mode_t)0777) | (mode_t)(user << 6) |
		(mode_t)((mask >= 0 ? mask : group) << 3) | (mode_t)other;
	return !extended && mask < 0;
}

/* The stored ACL in a malloc'ed buffer (*size bytes): 1, 0 if none, or -errno. */
static int acl_read(struct shoal_fs *fs, struct shoal_inode *ip, uint8_t **out, size_t *size)
{
	ssize_t n;

	*out = NULL;
	if (!ip_di(ip)->di_xattr)
		return 0;
	n = xattr_get(fs, ip, ACL_NAME, NULL, 0);
	if (n == -ENODATA)
		return 0;
	if (n < 0)
		return (int)n;
	*out = malloc((size_t)n ? (size_t)n : 1);
	if (!*out)
		return -ENOMEM;
	n = xattr_get(fs, ip, ACL_NAME, *out, (size_t)n);
	if (n < 0) {
		free(*out);
		*out = NULL;
		return n == -ENODATA ? 0 : (int)n;
	}
	*size = (size_t)n;
	return 1;
}

int acl_permission(struct shoal_fs *fs, struct shoal_inode *ip, int want)
{
	const struct shoal_dinode *di = ip_di(ip);
	uint8_t *v;
	size_t size;
	ssize_t n;
	int found = 0, err = acl_read(fs, ip, &v, &size);
	struct acl_ent e, hit = { 0, 0, 0 };

	if (err <= 0)
		return err ? err : 1;
	n = acl_count(v, size);
	if (n < 0) {
		free(v);
		return -EUCLEAN; /* stored by acl_to_mode's check: damaged */
	}
	err = -EACCES;
	for (ssize_t i = 0; i < n; i++) {
		ent_get(v, (size_t)i, &e);
		if (e.ae_tag == A_USER_OBJ && perm_uid() == di->di_uid) {
			err = (e.ae_perm & want) == want ? 0 : -EACCES;
			goto out;
		}
		if (e.ae_tag == A_USER && perm_uid() == e.ae_id) {
			hit = e;
			goto mask;
		}
		if ((e.ae_tag == A_GROUP_OBJ && perm_in_group(di->di_gid)) ||
		    (e.ae_tag == A_GROUP && perm_in_group(e.ae_id))) {
			found = 1;
			if ((e.ae_perm & want) == want) {
				hit = e;
				goto mask;
			}
		}
		if (e.ae_tag == A_OTHER) {
			if (!found)
				err = (e.ae_perm & want) == want ? 0 : -EACCES;
			goto out;
		}
	}
	goto out;
mask:
	for (ssize_t i = 0; i < n; i++) {
		ent_get(v, (size_t)i, &e);
		if (e.ae_tag == A_MASK)
			hit.ae_perm &= e.ae_perm;
	}
	err = (hit.ae_perm & want) == want ? 0 : -EACCES;
out:
	free(v);
	return err;
}

int acl_chmod_prepare(struct shoal_fs *fs, struct shoal_inode *ip)
{
	uint8_t *v;
	size_t size;
	int err = acl_read(fs, ip, &v, &size);

	free(v);
	if (err <= 0)
		return err;
	err = rg_hold_of(fs, ip_di(ip)->di_xattr);
	return err ? err : 1;
}

int acl_chmod(struct shoal_fs *fs, struct shoal_inode *ip)
{
	mode_t m = ip_di(ip)->di_mode;
	uint8_t *v;
	size_t size;
	ssize_t n;
	int err = acl_read(fs, ip, &v, &size), has_mask = 0;
	struct acl_ent e;

	if (err <= 0)
		return err;
	n = acl_count(v, size);
	for (ssize_t i = 0; i < n; i++) {
		ent_get(v, (size_t)i, &e);
		has_mask |= e.ae_tag == A_MASK;
	}
	for (ssize_t i = 0; i < n; i++) {
		uint16_t perm;
		ent_get(v, (size_t)i, &e);
		if (e.ae_tag == A_USER_OBJ)
			perm = (uint16_t)((m >> 6) & 7);
		else if (e.ae_tag == (has_mask ? A_MASK : A_GROUP_OBJ))
			perm = (uint16_t)((m >> 3) & 7);
		else if (e.ae_tag == A_OTHER)
			perm = (uint16_t)(m & 7);
		else
			continue;
		memcpy(v + 4 + 8 * (size_t)i + 2, &perm, 2);
	}
	err = n < 0 ? -EUCLEAN : xattr_set(fs, ip, ACL_NAME, v, size, 0);
	free(v);
	return err;
}

/*
 * posix_acl_create_masq(): the new inode's access ACL is dir's default ACL
 * with each class entry cut to what *mode asks, and *mode cut to the ACL.
 * 1 if the result says more than the mode (it must be stored), else 0.
 */
static int create_masq(uint8_t *v, ssize_t n, mode_t *mode)
{
	mode_t m = *mode & 0777;
	ssize_t group_obj = -1, mask_obj = -1;
	int not_equiv = 0;
	struct acl_ent e;

	for (ssize_t i = 0; i < n; i++) {
		ent_get(v, (size_t)i, &e);
		uint16_t p = e.ae_perm;
		switch (e.ae_tag) {
		case A_USER_OBJ:
			p &= (uint16_t)((m >> 6) & 7);
			m &= (mode_t)(p << 6) | ~(mode_t)0700;
			break;
		case A_USER:
		case A_GROUP:
			not_equiv = 1;
			break;
		case A_GROUP_OBJ:
			group_obj = i;
			break;
		case A_OTHER:
			p &= (uint16_t)(m & 7);
			m &= (mode_t)p | ~(mode_t)07;
			break;
		case A_MASK:
			mask_obj = i;
			not_equiv = 1;
			break;
		}
		memcpy(v + 4 + 8 * (size_t)i + 2, &p, 2);
	}
	ssize_t g = mask_obj >= 0 ? mask_obj : group_obj;
	if (g >= 0) {
		ent_get(v, (size_t)g, &e);
		uint16_t p = e.ae_perm & (uint16_t)((m >> 3) & 7);
		m &= (mode_t)(p << 3) | ~(mode_t)070;
		memcpy(v + 4 + 8 * (size_t)g + 2, &p, 2);
	}
	*mode = (*mode & ~(mode_t)0777) | m;
	return not_equiv;
}

int acl_create(struct shoal_fs *fs, struct shoal_inode *dp, mode_t *mode, mode_t umask,
	       struct acl_new *an)
{
	ssize_t n, count;

	memset(an, 0, sizeof(*an));
	if (S_ISLNK(*mode))
		return 0;
	n = ip_di(dp)->di_xattr ? xattr_get(fs, dp, ACL_DEFAULT, NULL, 0) : -ENODATA;
	if (n == -ENODATA) {
		*mode &= ~(umask & 0777);
		return 0;
	}
	if (n < 0)
		return (int)n;
	an->an_def = malloc((size_t)n ? (size_t)n : 1);
	if (!an->an_def)
		return -ENOMEM;
	n = xattr_get(fs, dp, ACL_DEFAULT, an->an_def, (size_t)n);
	count = n < 0 ? n : acl_count(an->an_def, (size_t)n);
	if (count < 0) {
		acl_new_free(an);
		return n < 0 ? (int)n : -EUCLEAN;
	}
	an->an_def_size = (size_t)n;
	an->an_acc = malloc((size_t)n ? (size_t)n : 1);
	if (!an->an_acc) {
		acl_new_free(an);
		return -ENOMEM;
	}
	memcpy(an->an_acc, an->an_def, (size_t)n);
	an->an_acc_size = (size_t)n;
	if (!create_masq(an->an_acc, count, mode)) {
		free(an->an_acc);
		an->an_acc = NULL; /* (2) */
	}
	if (!S_ISDIR(*mode)) {
		free(an->an_def);
		an->an_def = NULL;
	}
	return 0;
}

int acl_create_set(struct shoal_fs *fs, struct shoal_inode *ip, const struct acl_new *an)
{
	int err = 0;

	if (an->an_acc)
		err = xattr_set(fs, ip, ACL_NAME, an->an_acc, an->an_acc_size, 0);
	if (!err && an->an_def)
		err = xattr_set(fs, ip, ACL_DEFAULT, an->an_def, an->an_def_size, 0);
	return err;
}

void acl_new_free(struct acl_new *an)
{
	free(an->an_acc);
	free(an->an_def);
	an->an_acc = an->an_def = NULL;
}
