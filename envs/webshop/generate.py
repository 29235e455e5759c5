"""A deterministic generator of a WebShop-like product catalogue (used when no official data is
present).

It imitates the shape of WebShop's scraped Amazon catalogue (a reconstruction, not its data):
the five WebShop categories (beauty, food, fashion, furniture, electronics), product types each
with the search query it was "collected" under and an Amazon-style breadcrumb, made-up brands,
titles, bullet points (features), descriptions, attributes (the short phrases WebShop's
instructions ask for: "aluminum free", "machine wash"), customisation options (colour, size,
scent, flavor name, style) and prices (a single price or, for one product in ten, a range).
Every product also carries a synthetic instruction in the manner of ``items_ins_v2``: a request
for its type naming one to three of its attributes (``instruction_attributes``), from which
:mod:`.data` derives goals the way the original derives synthetic goals.

Properties the environment relies on (checked in the tests):

- product ``i`` depends only on ``(seed, i)``: the 1,000-product catalogue is a prefix of the
  100,000-product one;
- a product's text mentions exactly its own attributes among its type's attribute pool, so the
  attribute reward tells products of one type apart;
- no two attributes of a type match each other fuzzily (score > 85);
- selecting a goal's option values always earns the option reward: no value is turned into
  another word by the reward's substring colour normalisation ("sandalwood" would become "sand").
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

GENERATOR_VERSION = 1

APPAREL_COLORS = (
    "black", "white", "navy", "heather grey", "charcoal", "red", "royal blue", "olive green",
    "burgundy", "khaki", "pink", "light blue", "mustard yellow", "teal",
)  # fmt: skip
WOOD_COLORS = (
    "black", "white", "espresso", "walnut", "grey", "natural", "rustic brown", "oak",
    "cherry", "vintage brown",
)  # fmt: skip
DEVICE_COLORS = ("black", "white", "silver", "blue", "red", "rose gold", "space gray", "green")
APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
MEN_SHOE_SIZES = ("7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "13")
WOMEN_SHOE_SIZES = ("5", "5.5", "6", "6.5", "7", "7.5", "8", "8.5", "9", "10")


@dataclass(frozen=True)
class ProductType:
    """One kind of product. Attribute entries: ``"for sensitive skin"`` is the attribute
    ``sensitive skin`` said after the noun; ``"dark roast/medium roast"`` offers alternatives
    of which a product has at most one."""

    category: str
    query: str
    path: str
    nouns: tuple[str, ...]
    noun: str
    """How an instruction names the type ("a deodorant", "hair extensions")."""
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]
    features: tuple[str, ...]


def T(
    category: str,
    query: str,
    path: str,
    nouns: str,
    noun: str,
    attributes: str,
    options: dict[str, tuple[str, ...]],
    price: tuple[float, float],
    features: str,
) -> ProductType:
    """A :class:`ProductType` from ``;``-separated lists (keeps the table below readable)."""
    return ProductType(
        category,
        query,
        path,
        tuple(nouns.split(";")),
        noun,
        tuple(attributes.split(";")),
        tuple(options.items()),
        price,
        tuple(features.split(";")),
    )


B = "Beauty & Personal Care"
G = "Grocery & Gourmet Food"
C = "Clothing, Shoes & Jewelry"
H = "Home & Kitchen"
E = "Electronics"
PRODUCT_TYPES: tuple[ProductType, ...] = (
    # -- beauty
    T(
        "beauty",
        "deodorant",
        f"{B} › Personal Care › Deodorants & Antiperspirants › Deodorants",
        "Deodorant;Deodorant Stick;Natural Deodorant",
        "a deodorant",
        (
            "aluminum free;long lasting;for sensitive skin;natural ingredients;cruelty "
            "free;baking soda free"
        ),
        {
            "scent": ("bright citrus", "lavender", "unscented", "coconut", "cedarwood", "rose"),
            "size": (
                "2.6 ounce",
                "3 ounce (pack of 1)",
                "3 ounce (pack of 2)",
                "travel set (4-pack)",
            ),
        },
        (6, 25),
        (
            "Keeps you fresh from morning to night;Glides on smoothly without white marks;Made "
            "in small batches and tested on people, never on animals"
        ),
    ),
    T(
        "beauty",
        "shampoo",
        f"{B} › Hair Care › Shampoo & Conditioner › Shampoos",
        "Shampoo;Clarifying Shampoo;Shampoo and Conditioner Set",
        "a shampoo",
        "sulfate free;for dry hair;color safe;tea tree;argan oil;paraben free",
        {
            "size": ("8.5 fl oz", "12 fl oz", "16.9 fl oz", "33.8 fl oz"),
            "scent": ("mint", "citrus", "fresh linen", "unscented"),
        },
        (8, 40),
        (
            "Cleans gently and rinses out easily;Leaves hair soft, shiny and manageable;Suitable "
            "for everyday use by the whole family"
        ),
    ),
    T(
        "beauty",
        "face moisturizer",
        f"{B} › Skin Care › Face › Creams & Moisturizers › Face Moisturizers",
        "Face Moisturizer;Day Cream;Facial Lotion",
        "a face moisturizer",
        "hyaluronic acid;for oily skin;fragrance free;anti aging;vitamin c;non comedogenic",
        {"size": ("1 fl oz", "1.7 fl oz", "2.5 fl oz", "3.4 fl oz")},
        (10, 60),
        (
            "Absorbs quickly and is not greasy;Dermatologist tested formula;Wear it alone or "
            "under makeup"
        ),
    ),
    T(
        "beauty",
        "lipstick",
        f"{B} › Makeup › Lips › Lipstick",
        "Lipstick;Liquid Lipstick;Lip Color",
        "a lipstick",
        "long lasting;matte finish;cruelty free;moisturizing;vegan;waterproof",
        {
            "color": (
                "ruby red",
                "nude pink",
                "coral",
                "berry",
                "mauve",
                "plum",
                "classic red",
                "rose",
            )
        },
        (5, 30),
        (
            "Rich color in a single swipe;Comfortable on the lips all day;Slim bullet that fits "
            "in any bag"
        ),
    ),
    T(
        "beauty",
        "nail polish",
        f"{B} › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
        "Nail Polish;Gel Nail Polish;Nail Lacquer",
        "a nail polish",
        "quick drying;non toxic;chip resistant;vegan;high gloss;easy to remove",
        {
            "color": ("cherry red", "baby pink", "lilac", "navy", "nude", "mint", "gold glitter"),
            "size": ("pack of 1", "pack of 3", "pack of 6"),
        },
        (4, 25),
        "Smooth brush for an even coat;Salon finish at home;Opaque in two coats",
    ),
    T(
        "beauty",
        "hair extensions",
        f"{B} › Hair Care › Hair Extensions, Wigs & Accessories › Hair Extensions",
        "Hair Extensions;Hairpieces;Hair Pieces",
        "hair extensions",
        "clip in;human hair;natural looking;heat resistant;tangle free;double weft",
        {
            "color": (
                "jet black",
                "dark brown",
                "light brown",
                "ash blonde",
                "honey blonde",
                "auburn",
            ),
            "size": ("14 inch", "18 inch", "22 inch"),
        },
        (15, 90),
        "Blends with your own hair;Can be washed and styled;Comes with a storage bag",
    ),
    T(
        "beauty",
        "electric toothbrush",
        f"{B} › Oral Care › Toothbrushes & Accessories › Electric Toothbrushes",
        "Electric Toothbrush;Sonic Toothbrush;Power Toothbrush",
        "an electric toothbrush",
        (
            "rechargeable;for sensitive teeth;travel case;soft bristles;long battery life;two "
            "minute timer"
        ),
        {"color": ("white", "black", "pink", "blue", "purple")},
        (20, 90),
        (
            "Removes more plaque than a manual brush;Five cleaning modes;Includes two "
            "replacement heads"
        ),
    ),
    T(
        "beauty",
        "body wash",
        f"{B} › Personal Care › Bath & Bathing Accessories › Bath › Body Washes",
        "Body Wash;Shower Gel;Moisturizing Body Wash",
        "a body wash",
        "for dry skin;sulfate free;shea butter;coconut oil;hypoallergenic;plant based",
        {
            "scent": ("coconut", "lavender", "eucalyptus", "citrus", "unscented"),
            "size": ("12 fl oz", "16 fl oz", "32 fl oz", "16 fl oz (pack of 2)"),
        },
        (6, 30),
        (
            "Rich lather that rinses clean;Leaves skin soft and hydrated;Pump bottle for easy "
            "use in the shower"
        ),
    ),
    # -- food
    T(
        "food",
        "coffee beans",
        f"{G} › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
        "Whole Bean Coffee;Coffee Beans;Espresso Beans",
        "coffee beans",
        (
            "dark roast/medium roast/light roast;fair trade;single origin;low acid;usda "
            "organic;decaf"
        ),
        {
            "size": (
                "12 ounce (pack of 1)",
                "2 pound (pack of 1)",
                "12 ounce (pack of 2)",
                "5 pound",
            ),
            "flavor name": ("original", "hazelnut", "vanilla", "chocolate"),
        },
        (9, 45),
        (
            "Roasted in small batches for a smooth cup;Grind fresh for drip, French press or "
            "espresso;Packed in a bag with a one way valve"
        ),
    ),
    T(
        "food",
        "protein bars",
        f"{G} › Snack Foods › Bars › Protein Bars",
        "Protein Bars;Protein Snack Bars;Nutrition Bars",
        "protein bars",
        "gluten free;low sugar;high protein;keto friendly;non gmo;plant based",
        {
            "flavor name": (
                "chocolate chip",
                "peanut butter",
                "cookie dough",
                "salted caramel",
                "birthday cake",
                "lemon",
            ),
            "size": ("12 count", "15 count (pack of 1)", "24 count"),
        },
        (12, 45),
        "A filling snack between meals;Soft and chewy texture;Great before or after a workout",
    ),
    T(
        "food",
        "green tea",
        f"{G} › Beverages › Coffee, Tea & Cocoa › Tea › Green Tea",
        "Green Tea;Green Tea Bags;Tea",
        "green tea",
        "usda organic;decaffeinated;individually wrapped;sugar free;loose leaf;non gmo",
        {
            "flavor name": ("jasmine", "matcha", "mint", "lemon ginger", "original"),
            "size": ("20 count (pack of 1)", "100 count", "20 count (pack of 6)"),
        },
        (5, 30),
        "Smooth taste without bitterness;Brew hot or iced;Sourced from family farms",
    ),
    T(
        "food",
        "dark chocolate",
        f"{G} › Candy & Chocolate › Chocolate › Chocolate Bars",
        "Dark Chocolate;Dark Chocolate Bar;Chocolate Bars",
        "dark chocolate",
        "dairy free;fair trade;sugar free;vegan;gluten free;individually wrapped",
        {
            "flavor name": ("sea salt", "almond", "orange", "mint", "raspberry"),
            "size": ("3 ounce (pack of 1)", "3 ounce (pack of 12)", "1.5 ounce (pack of 24)"),
        },
        (4, 40),
        "Made with seventy percent cacao;Snap, melt and a long finish;A treat to share",
    ),
    T(
        "food",
        "olive oil",
        f"{G} › Pantry Staples › Cooking Oils, Vinegars & Sprays › Oils › Olive Oil",
        "Olive Oil;Olive Oil Bottle;Cooking Oil",
        "olive oil",
        "extra virgin;cold pressed;usda organic;non gmo;single origin;glass bottle",
        {"size": ("16.9 fl oz", "25.5 fl oz", "33.8 fl oz", "1 gallon")},
        (8, 50),
        (
            "Fruity and peppery taste;Perfect for salads, dipping and cooking;Harvested early in "
            "the season"
        ),
    ),
    T(
        "food",
        "beef jerky",
        f"{G} › Snack Foods › Jerky & Dried Meats › Beef Jerky",
        "Beef Jerky;Jerky Sticks;Beef Snack",
        "beef jerky",
        "high protein;grass fed;low sugar;gluten free;keto friendly;nitrate free",
        {
            "flavor name": ("original", "teriyaki", "hickory", "sweet & hot", "smoked"),
            "size": ("2.5 ounce", "3.25 ounce (pack of 4)", "10 ounce"),
        },
        (6, 35),
        "Slow smoked and thinly sliced;Tender bite full of flavor;A snack for the trail",
    ),
    T(
        "food",
        "trail mix",
        f"{G} › Snack Foods › Trail Mix",
        "Trail Mix;Snack Mix;Nut Mix",
        "trail mix",
        "non gmo;individually wrapped;low sodium;vegan;kosher;resealable bag",
        {
            "flavor name": ("tropical", "sweet & salty", "classic", "berry blend", "cranberry nut"),
            "size": ("1 ounce (pack of 24)", "26 ounce", "3 pound"),
        },
        (7, 30),
        (
            "A mix of nuts, seeds and dried fruit;Energy for hikes and road trips;Great in lunch "
            "boxes"
        ),
    ),
    T(
        "food",
        "seasoning blend",
        f"{G} › Pantry Staples › Herbs, Spices & Seasonings › Mixed Spices & Seasonings",
        "Seasoning Blend;Spice Blend;All Purpose Seasoning",
        "a seasoning blend",
        "salt free;usda organic;non gmo;kosher;no msg;gluten free",
        {
            "flavor name": ("all purpose", "garlic herb", "lemon pepper", "taco", "cajun"),
            "size": ("2.5 ounce", "5 ounce", "2.5 ounce (pack of 3)"),
        },
        (4, 20),
        (
            "Adds flavor to meat, fish and vegetables;Shake it on before or after "
            "cooking;Blended and packed in small batches"
        ),
    ),
    # -- fashion
    T(
        "fashion",
        "men's t shirts",
        f"{C} › Men › Clothing › Shirts › T-Shirts",
        "T-Shirt;Crew Neck T-Shirt;Tee",
        "a men's t-shirt",
        (
            "machine wash;short sleeve/long sleeve;regular fit/relaxed fit;moisture "
            "wicking;tagless;100% cotton"
        ),
        {"color": APPAREL_COLORS, "size": APPAREL_SIZES},
        (8, 30),
        "Soft jersey knit fabric;Classic crew neckline;Holds its shape wash after wash",
    ),
    T(
        "fashion",
        "women's dresses",
        f"{C} › Women › Clothing › Dresses › Casual",
        "Dress;Casual Dress;Summer Dress",
        "a women's dress",
        (
            "machine wash;short sleeve/long sleeve;elastic waist;polyester spandex;v neck;with "
            "pockets"
        ),
        {"color": APPAREL_COLORS, "size": APPAREL_SIZES},
        (18, 60),
        (
            "Flowy silhouette that flatters;Easy to dress up or down;Perfect for the beach, "
            "office or a party"
        ),
    ),
    T(
        "fashion",
        "men's running shoes",
        f"{C} › Men › Shoes › Athletic › Running › Road Running",
        "Running Shoes;Sneakers;Athletic Shoes",
        "men's running shoes",
        "non slip;rubber sole;lightweight;breathable mesh;arch support;memory foam",
        {"color": APPAREL_COLORS, "size": MEN_SHOE_SIZES},
        (30, 120),
        (
            "Cushioned midsole absorbs impact;Lace up closure for a secure fit;Made for road "
            "runs and gym sessions"
        ),
    ),
    T(
        "fashion",
        "women's leggings",
        f"{C} › Women › Clothing › Active › Active Leggings",
        "Leggings;Yoga Pants;Workout Leggings",
        "women's leggings",
        "high waist;tummy control;moisture wicking;squat proof;4 way stretch;with pockets",
        {"color": APPAREL_COLORS, "size": APPAREL_SIZES},
        (12, 40),
        "Buttery soft fabric;Wide waistband that stays put;For yoga, running or lounging",
    ),
    T(
        "fashion",
        "hoodies for men",
        f"{C} › Men › Clothing › Active › Active Hoodies",
        "Hoodie;Pullover Hoodie;Hooded Sweatshirt",
        "a men's hoodie",
        "fleece lined;drawstring closure;kangaroo pocket;machine wash;zip up;relaxed fit",
        {"color": APPAREL_COLORS, "size": APPAREL_SIZES},
        (20, 60),
        "Warm and cozy for cool days;Ribbed cuffs and hem;Layers well under a jacket",
    ),
    T(
        "fashion",
        "athletic socks",
        f"{C} › Men › Clothing › Socks › Athletic Socks",
        "Athletic Socks;Crew Socks;Ankle Socks",
        "athletic socks",
        "moisture wicking;cushioned sole;arch support;cotton blend;no show;reinforced heel",
        {
            "color": ("black", "white", "grey", "assorted", "navy"),
            "size": ("shoe size 6-8", "shoe size 9-11", "shoe size 12-14"),
            "pack": ("6 pairs", "10 pairs", "12 pairs"),
        },
        (8, 30),
        (
            "Soft and durable for all day comfort;Keeps feet dry in your shoes;Stays up without "
            "slipping"
        ),
    ),
    T(
        "fashion",
        "women's sandals",
        f"{C} › Women › Shoes › Sandals › Flat Sandals",
        "Sandals;Flat Sandals;Slide Sandals",
        "women's sandals",
        "open toe;ankle strap;non slip;arch support;rubber sole;faux leather",
        {"color": APPAREL_COLORS, "size": WOMEN_SHOE_SIZES},
        (15, 60),
        "Easy to slip on and off;Padded footbed for comfort;Goes with dresses and jeans",
    ),
    T(
        "fashion",
        "pendant necklace",
        f"{C} › Women › Jewelry › Necklaces › Pendant Necklaces",
        "Pendant Necklace;Necklace;Charm Necklace",
        "a pendant necklace",
        "sterling silver;hypoallergenic;gift box;adjustable chain;14k gold plated;nickel free",
        {"color": ("silver", "gold", "rose gold"), "size": ("16 inch", "18 inch", "20 inch")},
        (12, 80),
        "Polished to a bright shine;A thoughtful gift for her;Secure lobster clasp",
    ),
    # -- furniture
    T(
        "furniture",
        "office chair",
        (f"{H} › Furniture › Home Office Furniture › Home Office Chairs › Home Office Desk Chairs"),
        "Office Chair;Desk Chair;Ergonomic Chair",
        "an office chair",
        (
            "lumbar support;adjustable height;breathable mesh;easy assembly;with armrests;swivel "
            "wheels"
        ),
        {"color": ("black", "grey", "white", "blue", "pink")},
        (60, 250),
        (
            "Supports you through long work days;Smooth rolling casters;Weight capacity of 250 "
            "pounds"
        ),
    ),
    T(
        "furniture",
        "bookcase",
        f"{H} › Furniture › Living Room Furniture › Bookcases",
        "Bookcase;Bookshelf;Storage Shelf",
        "a bookcase",
        "easy assembly;solid wood;storage space;space saving;wall anchor;adjustable shelves",
        {"color": WOOD_COLORS, "size": ("3 tier", "4 tier", "5 tier")},
        (40, 200),
        (
            "Shows off books, plants and photos;Sturdy frame that does not wobble;Fits in a "
            "living room, office or bedroom"
        ),
    ),
    T(
        "furniture",
        "coffee table",
        f"{H} › Furniture › Living Room Furniture › Tables › Coffee Tables",
        "Coffee Table;Cocktail Table;Living Room Table",
        "a coffee table",
        "lift top;solid wood;easy assembly;tempered glass;metal frame;hidden storage",
        {"color": WOOD_COLORS},
        (60, 300),
        (
            "The centerpiece of your living room;Room for drinks, books and remotes;Smooth edges "
            "and a stable base"
        ),
    ),
    T(
        "furniture",
        "bed frame",
        f"{H} › Furniture › Bedroom Furniture › Beds, Frames & Bases › Beds",
        "Bed Frame;Platform Bed;Upholstered Bed",
        "a bed frame",
        (
            "under bed storage;easy assembly;metal frame;noise free;upholstered headboard;no box "
            "spring needed"
        ),
        {"size": ("twin", "full", "queen", "king"), "color": ("black", "grey", "white", "beige")},
        (90, 450),
        "Strong slats support the mattress;Tool kit included;Clean modern lines",
    ),
    T(
        "furniture",
        "bar stools",
        f"{H} › Furniture › Game & Recreation Room Furniture › Home Bar Furniture › Barstools",
        "Bar Stools;Counter Stools;Barstools",
        "bar stools",
        "swivel seat;with footrest;adjustable height;faux leather;set of 2;easy assembly",
        {
            "color": ("black", "white", "grey", "brown", "green"),
            "size": ("24 inch", "26 inch", "30 inch"),
        },
        (50, 250),
        "Seating for a kitchen island or bar;Padded seat for comfort;Protective floor pads",
    ),
    T(
        "furniture",
        "shoe rack",
        (
            f"{H} › Storage & Organization › Clothing & Closet Storage › Shoe Organizers › Free "
            "Standing Shoe Racks"
        ),
        "Shoe Rack;Shoe Organizer;Shoe Shelf",
        "a shoe rack",
        "space saving;easy assembly;stackable;for entryway;bamboo;water resistant",
        {"color": WOOD_COLORS, "size": ("3 tier", "4 tier", "5 tier", "10 tier")},
        (15, 80),
        (
            "Keeps shoes tidy and off the floor;Holds sneakers, boots and heels;Fits in closets "
            "and hallways"
        ),
    ),
    T(
        "furniture",
        "area rug",
        f"{H} › Home Décor Products › Area Rugs, Runners & Pads › Area Rugs",
        "Area Rug;Rug;Runner Rug",
        "an area rug",
        "non slip;machine washable;for living room;stain resistant;low pile;shag",
        {
            "color": ("grey", "cream", "navy", "multicolor", "blue", "beige", "rust"),
            "size": ("2' x 3'", "4' x 6'", "5' x 7'", "8' x 10'"),
        },
        (20, 200),
        "Soft underfoot;Adds warmth to any room;Colors that do not fade",
    ),
    T(
        "furniture",
        "nightstand",
        f"{H} › Furniture › Bedroom Furniture › Nightstands",
        "Nightstand;Bedside Table;End Table",
        "a nightstand",
        "with drawer;charging station;solid wood;easy assembly;mid century;open shelf",
        {"color": WOOD_COLORS, "size": ("set of 1", "set of 2")},
        (30, 150),
        "Keeps essentials within reach;Compact for small bedrooms;Smooth finish",
    ),
    # -- electronics
    T(
        "electronics",
        "wireless earbuds",
        f"{E} › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
        "Wireless Earbuds;Bluetooth Earbuds;Earphones",
        "wireless earbuds",
        (
            "noise cancelling;long battery life;water resistant;wireless charging;touch "
            "control;built in microphone"
        ),
        {"color": DEVICE_COLORS},
        (20, 150),
        (
            "Pairs with your phone in seconds;Three sizes of ear tips included;Clear sound for "
            "music and calls"
        ),
    ),
    T(
        "electronics",
        "phone case",
        "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        "Phone Case;Protective Case;Cover",
        "a phone case",
        "shockproof;wireless charging;slim fit;screen protector;kickstand;raised edges",
        {
            "color": DEVICE_COLORS,
            "size": ("6.1 inch", "6.1 inch pro", "6.7 inch", "6.7 inch pro max"),
        },
        (6, 30),
        (
            "Precise cutouts for ports and buttons;Grippy feel in the hand;Protects against "
            "drops and scratches"
        ),
    ),
    T(
        "electronics",
        "usb c cable",
        (
            f"{E} › Computers & Accessories › Computer Accessories & Peripherals › Cables & "
            "Accessories › Cables › USB Cables"
        ),
        "USB C Cable;Charging Cable;Charger Cord",
        "a usb c cable",
        "fast charging;braided nylon;high speed data;durable;aluminum housing;right angle",
        {
            "color": ("black", "white", "grey", "red"),
            "size": ("3 ft", "6 ft", "10 ft", "3 ft (2 pack)"),
        },
        (5, 25),
        (
            "Works with phones, tablets and laptops;Tested to bend thousands of times;Charges "
            "while you play"
        ),
    ),
    T(
        "electronics",
        "bluetooth speaker",
        (f"{E} › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers"),
        "Bluetooth Speaker;Portable Speaker;Wireless Speaker",
        "a bluetooth speaker",
        ("waterproof;long battery life;stereo sound;built in microphone;hands free;rugged design"),
        {"color": DEVICE_COLORS},
        (20, 150),
        (
            "Loud, clear sound with deep bass;Take it to the beach or the pool;Pair two speakers "
            "for a party"
        ),
    ),
    T(
        "electronics",
        "power bank",
        "Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
        "Power Bank;Portable Charger;Battery Pack",
        "a power bank",
        "fast charging;usb c;led display;high capacity;wireless charging;compact design",
        {"color": ("black", "white", "blue", "pink"), "size": ("10000mah", "20000mah", "26800mah")},
        (15, 70),
        "Charges two devices at once;Fits in a pocket or bag;Airline safe",
    ),
    T(
        "electronics",
        "webcam",
        (
            f"{E} › Computers & Accessories › Computer Accessories & Peripherals › Audio & Video "
            "Accessories › Webcams"
        ),
        "Webcam;Web Camera;Streaming Camera",
        "a webcam",
        "1080p hd;built in microphone;auto focus;wide angle;plug and play;privacy cover",
        {"style": ("1080p", "2k", "4k")},
        (20, 120),
        ("Crisp video for calls and streams;Clip fits laptops and monitors;Corrects for low light"),
    ),
    T(
        "electronics",
        "security camera",
        f"{E} › Camera & Photo › Video Surveillance › Surveillance Cameras › Bullet Cameras",
        "Security Camera;Outdoor Camera;Surveillance Camera",
        "a security camera",
        ("night vision;motion detection;two way audio;weatherproof;cloud storage;battery powered"),
        {"size": ("1 pack", "2 pack", "4 pack"), "color": ("white", "black")},
        (25, 200),
        (
            "Watch your home from your phone;Alerts when someone is at the door;Easy setup in "
            "minutes"
        ),
    ),
    T(
        "electronics",
        "keyboard",
        (
            f"{E} › Computers & Accessories › Computer Accessories & Peripherals › Keyboards, "
            "Mice & Accessories › Keyboards"
        ),
        "Keyboard;Wireless Keyboard;Mechanical Keyboard",
        "a keyboard",
        "rechargeable;backlit keys;ergonomic design;quiet typing;multi device;spill resistant",
        {
            "color": ("black", "white", "grey", "pink"),
            "style": ("full size", "tenkeyless", "compact"),
        },
        (20, 130),
        (
            "Comfortable keys for long typing sessions;Works with Windows and Mac;Full set of "
            "media keys"
        ),
    ),
)

_BRAND_HEADS = (
    "Ver", "Lum", "Kin", "Aur", "Nov", "Zel", "Bel", "Cor", "Dar", "Eli", "Fen", "Gal", "Hav",
    "Iso", "Jun", "Kal", "Lor", "Mar", "Nol", "Orb", "Pax", "Quo", "Ros", "Sol", "Tav", "Umb",
    "Val", "Wex", "Yor", "Zan",
)  # fmt: skip
_BRAND_TAILS = (
    "ora", "ix", "ella", "ano", "eto", "ique", "ova", "ara", "ent", "ilo", "ux", "ami", "eon",
    "ari", "ondo", "esse",
)  # fmt: skip
_LEADS = ("i need", "i want", "i am looking for", "i would like", "find me", "i'm looking for")
_INTROS = (
    "is made for people who want quality without compromise",
    "is designed for everyday use",
    "brings together thoughtful design and dependable performance",
    "is a customer favorite",
    "is built to last",
)
PRICE_RANGE_SHARE = 0.1
"""Share of products priced as a range ("$12.99 to $19.99"), as some WebShop products are."""


def split_attribute(entry: str) -> tuple[str, bool]:
    """``"for sensitive skin"`` -> ``("sensitive skin", True)`` (said after the noun);
    ``"aluminum free"`` -> ``("aluminum free", False)``."""
    for prep in ("for ", "with "):
        if entry.startswith(prep):
            return entry[len(prep) :], True
    return entry, False


def attribute_pool(ptype: ProductType) -> list[str]:
    """Every attribute a product of ``ptype`` can have (alternatives expanded)."""
    return [split_attribute(alt)[0] for entry in ptype.attributes for alt in entry.split("/")]


_BASE36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _base36(n: int, width: int = 8) -> str:
    out = []
    for _ in range(width):
        n, r = divmod(n, 36)
        out.append(_BASE36[r])
    return "".join(reversed(out))


def _asin(i: int, seed: int) -> str:
    # Bijections of 0..36^8-1 (affine maps with a multiplier prime to 36, and reversing the
    # digits in between) give unique 10-character ASINs that do not look sequential.
    n = i
    for mult, add in ((1_679_616_013, 7_919 * (seed + 1)), (1_234_567_891, 104_729), (777_767, 1)):
        n = int(_base36((n * mult + add) % 36**8)[::-1], 36)
    return "B0" + _base36(n)


def _titled(text: str) -> str:
    return " ".join(
        w if any(c.isdigit() for c in w) else w[:1].upper() + w[1:] for w in text.split()
    )


def _price_tag(pricing: list[float]) -> str:
    # The original prints Python floats: "$10.99", "$100.0", "$12.99 to $19.99".
    return f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"


def generate_product(i: int, seed: int = 0) -> dict[str, Any]:
    """Product ``i`` of the catalogue of ``seed``, with the fields of :class:`.data.Product`."""
    rng = random.Random(seed * 1_000_003 + i)
    ptype = PRODUCT_TYPES[rng.randrange(len(PRODUCT_TYPES))]
    brand = rng.choice(_BRAND_HEADS) + rng.choice(_BRAND_TAILS)
    noun = rng.choice(ptype.nouns)
    # Two to four attributes; of alternatives ("dark roast/medium roast") at most one.
    entries = rng.sample(ptype.attributes, rng.randint(2, min(4, len(ptype.attributes))))
    chosen = [split_attribute(rng.choice(e.split("/"))) for e in entries]
    attributes = [a for a, _ in chosen]
    pre = [a for a, post in chosen if not post]
    post = [a for a, is_post in chosen if is_post]

    title = f"{brand} {_titled(pre[0]) + ' ' if pre else ''}{noun}"
    if post:
        phrase = next(e for e in ptype.attributes if split_attribute(e)[0] == post[0])
        title += " " + _titled(phrase)
    if len(pre) > 1:
        title += ", " + _titled(pre[1])

    features = list(ptype.features)
    rng.shuffle(features)
    bullets = [f"{a.upper()}: {features[k % len(features)]}" for k, a in enumerate(attributes)] + [
        features[-1] + "."
    ]
    description = (
        f"{brand} {noun.lower()} {rng.choice(_INTROS)}. "
        + " ".join(f"{f}." for f in features)
        + " What you get: "
        + ", ".join(attributes)
        + "."
    )

    options: list[tuple[str, list[str]]] = []
    if rng.random() < 0.9:
        for name, pool in ptype.options:
            if len(ptype.options) > 1 and rng.random() < 0.25:
                continue  # some products offer only part of the type's options
            k = rng.randint(min(2, len(pool)), min(6, len(pool)))
            start = rng.randrange(len(pool) - k + 1)
            values = list(pool[start : start + k]) if name == "size" else rng.sample(pool, k)
            options.append((name, values))

    lo, hi = ptype.price
    base = round(rng.uniform(lo, hi)) - 0.01
    pricing = [base]
    if rng.random() < PRICE_RANGE_SHARE:
        pricing = [base, round(base * rng.uniform(1.1, 1.6)) - 0.01]

    # The synthetic instruction (as in items_ins_v2): one to three of the product's attributes.
    asked = rng.sample(chosen, rng.randint(1, min(3, len(chosen))))
    plural = not ptype.noun.startswith(("a ", "an "))
    instruction = f"{rng.choice(_LEADS)} {ptype.noun}"
    asked_post = [a for a, is_post in asked if is_post]
    asked_pre = [a for a, is_post in asked if not is_post]
    for a in asked_post:
        phrase = next(e for e in ptype.attributes if split_attribute(e)[0] == a)
        instruction += f" {phrase}"
    if asked_pre:
        instruction += f" that {'are' if plural else 'is'} " + " and ".join(asked_pre)
    return {
        "asin": _asin(i, seed),
        "title": title,
        "category": ptype.category,
        "query": ptype.query,
        "product_category": ptype.path,
        "description": description,
        "bullet_points": bullets,
        "pricing": pricing,
        "price_tag": _price_tag(pricing),
        "options": options,
        "attributes": attributes,
        "instruction": instruction,
        "instruction_attributes": [a for a, _ in asked],
    }


def generate_catalog(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Products ``0..n-1`` of the catalogue of ``seed`` (about 25 per product type at 1,000)."""
    return [generate_product(i, seed) for i in range(n)]
