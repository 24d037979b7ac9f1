"""Container images of the lab: variants, the Docker engine, building, a base image, running the lab inside.

One module per job, all standard library only (nox and CI call them with the host's python, which
has no torch and no pydantic):

- `variants`: the image variants (Dockerfile, stage, what each is for) and the lab's image names;
- `engine`: asking the Docker engine (is it there, which OS, GPUs, an image's id and size);
- `pipconf`: the host's pip settings (index, CA bundle, wheelhouse) as build options;
- `context`: the staged build context (the lab's tracked files, the CA bundle, the wheelhouse);
- `build`: `docker build` of the variants, each ending OK, NOT_RUN (with why) or FAILED;
- `base`: a Debian base image made with debootstrap from the host's mirror (hosts without a registry);
- `run`: `docker run` of the lab in an image, or why it must run on the host instead;
- `probe`: the Inductor compile probe run inside an image (imports torch only when called).

The command line is `python -m lab images|base-image|image-run|inductor-probe` (lab/commands/).
Rule 1 of the lab applies here too: an image that cannot be built on this host is NOT_RUN with a
reason code and the sentence saying how to make it build; the lab falling back to the host records
the reason in the manifest (LAB_HOST_FALLBACK).
"""
