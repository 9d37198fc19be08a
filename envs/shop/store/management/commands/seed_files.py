"""Make the files a seeded database refers to, in the folder beside it (settings.FILES_DIR): a picture
for every product image row, drawn by Pillow from the product's own data, its thumbnails, and the
search index.

  MAG_DJANGO_DB=/tmp/shop.sqlite3 python manage.py seed_files

Run it after `seed` (the suite does, once per seed: envs/shop/suite.py `after_seed`; every episode gets a
copy of the folder).
The pictures are a function of the rows (the same seed draws the same pixels); their thumbnails are
made here in every size Oscar's templates ask for (sorl records them in the database), so no page
makes one while an agent waits; the index is Oscar's own search index (haystack's rebuild_index over
whoosh), so the storefront's search finds the seed's products.
"""
import json
import os
import zlib

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from oscar.core.loading import get_model
from oscar.core.thumbnails import get_thumbnailer
from PIL import Image, ImageDraw, ImageFont
from sorl.thumbnail.models import KVStore

ProductImage = get_model("catalogue", "ProductImage")

SIDE = 400   # px; Oscar's product page shows 400 x 400 at most
# the sizes of Oscar's templates ({% oscar_thumbnail image.original SIZE OPTIONS %}): basket, lists, the
# product page, the dashboard's product list and form
THUMBNAILS = [("100x100", {"upscale": False}), ("x155", {"upscale": False}), ("440x400", {"upscale": False}),
              ("200x200", {"upscale": False}), ("70x70", {"upscale": False}), ("65x55", {"crop": "center"})]
SHADES = {   # top category -> (background, ink)
    "Kitchen": ((244, 226, 206), (150, 84, 40)),
    "Garden": ((222, 238, 214), (58, 110, 52)),
    "Outdoor": ((214, 230, 240), (40, 86, 120)),
    "Home": ((238, 224, 236), (120, 60, 110)),
}


def draw(title, top):
    """A product's picture: its initials in a ring, its name below, in its category's colours; the ring's
    size varies with the title, so products of one category do not all look alike."""
    background, ink = SHADES.get(top, ((230, 230, 230), (80, 80, 80)))
    picture = Image.new("RGB", (SIDE, SIDE), background)
    pen = ImageDraw.Draw(picture)
    radius = 90 + zlib.crc32(title.encode()) % 40
    centre = (SIDE // 2, SIDE // 2 - 30)
    pen.ellipse([centre[0] - radius, centre[1] - radius, centre[0] + radius, centre[1] + radius],
                outline=ink, width=8)
    initials = "".join(word[0] for word in title.split()[-2:]).upper()
    pen.text(centre, initials, fill=ink, anchor="mm", font=ImageFont.load_default(size=84))
    pen.text((SIDE // 2, SIDE - 50), title, fill=ink, anchor="mm", font=ImageFont.load_default(size=24))
    return picture


class Command(BaseCommand):
    help = "Draw the product images of a seeded database and build its search index."

    def handle(self, *args, **options):
        if os.path.exists(settings.FILES_DIR):
            raise CommandError(f"{settings.FILES_DIR} exists: make the files of a freshly seeded database")
        for image in ProductImage.objects.select_related("product").order_by("id"):
            top = image.product.categories.get().get_ancestors_and_self()[0].name
            path = os.path.join(settings.MEDIA_ROOT, image.original.name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            draw(image.product.title, top).save(path, optimize=False)
            for size, options in THUMBNAILS:
                get_thumbnailer().generate_thumbnail(image.original, size=size, **options)
        # sorl lists an image's thumbnails from a set, in an order Python salts per process: sorted, two
        # builds of one seed write the same rows
        for record in KVStore.objects.filter(key__contains="||thumbnails||"):
            record.value = json.dumps(sorted(json.loads(record.value)))
            record.save()
        call_command("rebuild_index", interactive=False, verbosity=0)
        self.stdout.write(f"drew {ProductImage.objects.count()} images and their thumbnails; "
                          "indexed the catalogue")
