"""The words and patterns of offline extraction (app/core/entities.py), English and Chinese:
who the user's people are called, the words that make a statement a question, a wish or
somebody else's, and the lexicons a relation's object must come from. Kept apart from the
logic so a reader can see, and extend, what is recognised.
"""

from __future__ import annotations

import re


def _words(text: str) -> list[str]:
    return text.split()


# --- the user's people ------------------------------------------------------------------

# The word in the turn -> the predicate written (the LLM path's vocabulary: "sister",
# "lives_in", "works_at", "owns"; tests/integration/test_graph.py).
FAMILY_EN: dict[str, str] = {
    "sister": "sister",
    "brother": "brother",
    "mother": "mother",
    "mom": "mother",
    "mum": "mother",
    "father": "father",
    "dad": "father",
    "wife": "wife",
    "husband": "husband",
    "partner": "partner",
    "girlfriend": "girlfriend",
    "boyfriend": "boyfriend",
    "fiancé": "fiance",
    "fiancée": "fiance",
    "fiance": "fiance",
    "fiancee": "fiance",
    "son": "son",
    "daughter": "daughter",
    "cousin": "cousin",
    "aunt": "aunt",
    "uncle": "uncle",
    "niece": "niece",
    "nephew": "nephew",
    "grandmother": "grandmother",
    "grandma": "grandmother",
    "granny": "grandmother",
    "grandfather": "grandfather",
    "grandpa": "grandfather",
    "stepmother": "stepmother",
    "stepfather": "stepfather",
    "stepson": "stepson",
    "stepdaughter": "stepdaughter",
    "twin": "twin",
    "twin sister": "sister",
    "twin brother": "brother",
    "little sister": "sister",
    "little brother": "brother",
    "younger sister": "sister",
    "younger brother": "brother",
    "older sister": "sister",
    "older brother": "brother",
    "big sister": "sister",
    "big brother": "brother",
    "kid sister": "sister",
}
PEOPLE_EN: dict[str, str] = {
    "friend": "friend",
    "best friend": "friend",
    "boss": "boss",
    "manager": "manager",
    "colleague": "colleague",
    "coworker": "colleague",
    "co-worker": "colleague",
    "roommate": "roommate",
    "flatmate": "roommate",
    "housemate": "roommate",
    "neighbor": "neighbor",
    "neighbour": "neighbor",
    "mentor": "mentor",
    "therapist": "therapist",
    "landlord": "landlord",
    "teacher": "teacher",
}
FAMILY_ZH: dict[str, str] = {
    "妹妹": "sister",
    "姐姐": "sister",
    "哥哥": "brother",
    "弟弟": "brother",
    "妈妈": "mother",
    "母亲": "mother",
    "爸爸": "father",
    "父亲": "father",
    "老婆": "wife",
    "妻子": "wife",
    "太太": "wife",
    "老公": "husband",
    "丈夫": "husband",
    "先生": "husband",
    "女朋友": "girlfriend",
    "男朋友": "boyfriend",
    "对象": "partner",
    "未婚妻": "fiance",
    "未婚夫": "fiance",
    "儿子": "son",
    "女儿": "daughter",
    "表妹": "cousin",
    "表姐": "cousin",
    "表哥": "cousin",
    "表弟": "cousin",
    "堂妹": "cousin",
    "堂姐": "cousin",
    "堂哥": "cousin",
    "堂弟": "cousin",
    "奶奶": "grandmother",
    "外婆": "grandmother",
    "姥姥": "grandmother",
    "爷爷": "grandfather",
    "外公": "grandfather",
    "姥爷": "grandfather",
    "阿姨": "aunt",
    "姑姑": "aunt",
    "舅舅": "uncle",
    "叔叔": "uncle",
}
PEOPLE_ZH: dict[str, str] = {
    "朋友": "friend",
    "好朋友": "friend",
    "闺蜜": "friend",
    "老板": "boss",
    "领导": "boss",
    "同事": "colleague",
    "室友": "roommate",
    "邻居": "neighbor",
    "导师": "mentor",
    "老师": "teacher",
}

# --- pets -------------------------------------------------------------------------------

PETS_EN: dict[str, str] = {
    "dog": "dog",
    "puppy": "dog",
    "cat": "cat",
    "kitten": "cat",
    "rabbit": "rabbit",
    "bunny": "rabbit",
    "hamster": "hamster",
    "parrot": "parrot",
    "goldfish": "fish",
    "fish": "fish",
    "turtle": "turtle",
    "tortoise": "turtle",
    "horse": "horse",
    "guinea pig": "guinea_pig",
    "beagle": "dog",
    "labrador": "dog",
    "poodle": "dog",
    "corgi": "dog",
    "husky": "dog",
    "terrier": "dog",
    "retriever": "dog",
    "golden retriever": "dog",
    "spaniel": "dog",
    "dachshund": "dog",
    "bulldog": "dog",
    "pug": "dog",
    "shepherd": "dog",
    "collie": "dog",
    "greyhound": "dog",
    "chihuahua": "dog",
    "tabby": "cat",
    "siamese": "cat",
    "ragdoll": "cat",
    "maine coon": "cat",
}
PETS_ZH: dict[str, str] = {
    "狗": "dog",
    "小狗": "dog",
    "狗狗": "dog",
    "猫": "cat",
    "小猫": "cat",
    "猫咪": "cat",
    "兔子": "rabbit",
    "仓鼠": "hamster",
    "鹦鹉": "parrot",
    "乌龟": "turtle",
    "柯基": "dog",
    "金毛": "dog",
    "泰迪": "dog",
    "柴犬": "dog",
    "哈士奇": "dog",
    "比格": "dog",
    "布偶猫": "cat",
    "橘猫": "cat",
    "英短": "cat",
}

# --- work -------------------------------------------------------------------------------

# A role is accepted only when its last word is one of these (precision first: "I am a
# big fan" names no job).
ROLE_HEADS_EN = frozenset(
    _words(
        """engineer developer programmer teacher nurse doctor physician surgeon designer manager
    lawyer attorney architect accountant chef cook scientist researcher writer journalist
    editor consultant analyst pharmacist dentist photographer musician professor lecturer
    librarian electrician plumber translator marketer recruiter therapist psychologist
    veterinarian vet paramedic firefighter pilot mechanic carpenter barista waiter waitress
    bartender cashier economist statistician founder ceo cto cfo intern tutor student
    salesperson officer director administrator technician illustrator animator producer
    baker farmer midwife optometrist counselor counsellor actuary auditor banker
    """
    )
)
ROLES_ZH = _words(
    """软件工程师 工程师 程序员 产品经理 项目经理 经理 设计师 医生 大夫 护士 老师 教师 律师
    会计 会计师 记者 编辑 厨师 研究员 科学家 作家 翻译 销售 咨询顾问 顾问 分析师 药剂师 牙医
    摄影师 音乐家 教授 建筑师 司机 警察 公务员 研究生 博士生 大学生 学生 实习生 创业者 主管 运营"""
)

# --- diet, allergies, languages ---------------------------------------------------------

DIETS_EN: dict[str, str] = {
    "vegetarian": "vegetarian",
    "vegan": "vegan",
    "pescatarian": "pescatarian",
    "pescetarian": "pescatarian",
    "lactose intolerant": "lactose intolerant",
    "gluten intolerant": "gluten intolerant",
    "coeliac": "coeliac",
    "celiac": "coeliac",
    "diabetic": "diabetic",
    "teetotal": "teetotal",
    "kosher": "kosher",
    "halal": "halal",
}
FOODS_EN = frozenset(
    _words(
        """meat pork beef chicken fish seafood shellfish dairy milk cheese eggs egg gluten wheat
    nuts peanuts sugar alcohol lamb mushrooms onions garlic spicy food coriander cilantro
    shrimp prawns soy tofu"""
    )
)
LANGUAGES_EN = frozenset(
    _words(
        """English Portuguese Spanish French German Italian Dutch Swedish Norwegian Danish
    Finnish Polish Czech Russian Ukrainian Greek Turkish Arabic Hebrew Persian Farsi Hindi
    Urdu Bengali Tamil Mandarin Cantonese Chinese Japanese Korean Vietnamese Thai
    Indonesian Malay Tagalog Swahili Catalan Basque Galician Romanian Hungarian Icelandic
    Irish Welsh Esperanto Latin"""
    )
)
LANGUAGE_ZH = re.compile(r"[\u4e00-\u9fff]{1,3}[语文话]")

# --- what makes a clause no statement of the user's --------------------------------------

QUESTION_START_EN = re.compile(
    r"^\s*(?:do|does|did|is|are|was|were|should|shall|can|could|would|will|what|where|who|"
    r"whom|whose|which|how|why|when|have|has|am)\b",
    re.IGNORECASE,
)
HYPOTHETICAL_EN = re.compile(
    r"\b(?:if|whether|would|wouldn't|could|might|maybe|perhaps|wish|suppose|supposing|imagine|"
    r"considering|consider|thinking|planning|plan to|plans to|want to|wants to|wanna|"
    r"going to|gonna|hope|hoping|dream|dreaming|someday|one day|will|unless|pretend|"
    r"probably|should|in case|what if|tempted)\b|\w'd\b|\w'll\b",
    re.IGNORECASE,
)
REPORTED_EN = re.compile(
    r"\b(?:said|says|told|tells|thinks|think|thought|believes|claims|claimed|"
    r"according to|mentioned|heard|asked|asks|reckons|joked|pretended|wrote|quote)\b",
    re.IGNORECASE,
)
NEGATION_EN = re.compile(
    r"^(?:\s*(?:also|now|still|currently|just|really|actually|no longer|never|not|"
    r"don't|do not|didn't|did not|doesn't|does not|am not|'m not|isn't|is not|"
    r"haven't|have not|hasn't|has not|can't|cannot|won't|wasn't|ain't))*\s*"
    r"(?:no longer|never|not|don't|do not|didn't|did not|doesn't|does not|am not|'m not|"
    r"isn't|is not|haven't|have not|hasn't|has not|can't|cannot|won't|wasn't|ain't)\b",
    re.IGNORECASE,
)
QUESTION_ZH = re.compile(r"[吗呢么]\s*$|什么|哪[里儿个些]?|谁|怎么|为什么|多少|是不是|有没有|几个")
HYPOTHETICAL_ZH = re.compile(
    r"如果|假如|要是|假设|万一|打算|计划|准备|想要|想去|想搬|可能|也许|或许|希望|将来|以后|会不会|"
    r"梦想|的话|考虑|还是"
)
REPORTED_ZH = re.compile(
    r"(?<![会能])说(?![一英法德日中西韩俄粤普])|告诉我|听说|据说|[他她]觉得|[他她]认为"
)
NEGATION_ZH = re.compile(r"[不没别未非]")

# --- names ------------------------------------------------------------------------------

TITLES_EN = ("Dr.", "Mr.", "Mrs.", "Ms.", "Prof.", "Dr", "Mr", "Mrs", "Ms", "Prof")
# Capitalised words that name nothing: sentence starts, days, months, greetings, pronouns.
STOP_EN = frozenset(
    _words(
        """i i'm i've i'd i'll me my mine we our us you your he she they them their his her it
    its this that these those there here the a an and or but so if when then what where who
    why how which yes no not ok okay hi hello hey thanks thank please sorry well oh ah also
    just actually anyway btw lol haha sure great good nice cool wow yeah yep nope hmm
    monday tuesday wednesday thursday friday saturday sunday january february march april
    may june july august september october november december today tomorrow yesterday
    tonight christmas easter mom mum dad grandma grandpa dear sir madam god lord
    after before since during because although though while as at in on of for to from
    with by about into over under between through my sister brother mother father wife
    husband partner friend son daughter boss uncle aunt cousin let let's can could would
    should will do does did is are was were be been have has had last next every each all
    some any many much more most both either neither one two three first second
    my dog cat our mr mrs ms dr prof english"""
    )
)
# A capitalised span: up to four words, joined by a few lowercase particles of names.
NAME_WORD = r"(?:[A-Z][\w'’.&-]*|[A-Z]{2,}\w*)"
_PARTICLE = r"(?:de|da|do|dos|das|van|von|der|del|la|le|di|du|of|bin|al)\s+"
NAME_EN = rf"(?:(?:Dr|Mr|Mrs|Ms|Prof)\.?\s+)?{NAME_WORD}(?:\s+(?:{_PARTICLE})?{NAME_WORD}){{0,3}}"
CJK_NAME = r"[\u4e00-\u9fff]{2,4}"
NAME_ANY = rf"(?:{NAME_EN}|{CJK_NAME})"
STOP_ZH = frozenset(
    _words(
        """他 她 它 我们 他们 她们 自己 大家 什么 这个 那个 一个 已经 现在 今年 去年 明年
    过敏 工作 上班 读研 读书 上学 喜欢 一起 周末 每天 今天 昨天 明天 最近 非常 特别 觉得
    知道 因为 所以 但是 可以 没有 不是 就是 还是 老师 同学 朋友 家人 小时 时候 地方 东西
    谢谢 长大 安静 你好"""
    )
)
